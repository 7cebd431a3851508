-- Fold the runs that finished between pgqueue.tally_mark and a few seconds ago into
-- pgqueue.finished_tally (counts by queue and state), pgqueue.finished_totals (the
-- all-time counts the dashboard shows) and pgqueue.latency_tally (pickup
-- and duration histograms by queue: one pass, two grouping sets), and move the mark: one
-- worker at a time (the others skip the locked mark), at most an hour of history per
-- statement (a tally that fell behind catches up over several). `lag_seconds` leaves out
-- the runs whose finishing transaction may not have committed yet (finished_at is its
-- start). Reads runs_finished_queue_idx from the mark, queue by queue (a loose scan of
-- its queues, sql/parts/finished_queues.sql). LIMIT 1: the mark is one row, and
-- without statistics of the table (autovacuum off) the planner would take it for
-- thousands, price the statement in millions and JIT-compile it on every round (0.2 s).
WITH mark AS (
    SELECT upto AS old,
           least(upto + interval '1 hour',
                 date_bin('5 seconds', now() - %(lag_seconds)s * interval '1 second',
                          timestamptz '2000-01-01 UTC')) AS new
    FROM pgqueue.tally_mark
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
finished AS MATERIALIZED (
    SELECT date_bin('5 seconds', r.finished_at, timestamptz '2000-01-01 UTC') AS bucket,
           q.queue, r.state, date_part('epoch', r.started_at - r.run_at) AS pickup,
           date_part('epoch', r.finished_at - r.started_at) AS duration
    FROM mark m
    CROSS JOIN {{finished_queues}} q
    CROSS JOIN LATERAL (
        SELECT r.state, r.run_at, r.started_at, r.finished_at
        FROM pgqueue.runs r
        WHERE r.state IN ('succeeded', 'failed', 'canceled')
          AND r.queue = q.queue
          AND r.finished_at >= m.old AND r.finished_at < m.new
          AND r.finished_at >= pgqueue.tally_upto()  -- m.old or older: for the estimate
    ) r
),
counted AS (
    INSERT INTO pgqueue.finished_tally AS t (bucket, queue, state, n, picked, pickup_sum)
    SELECT bucket, queue, state, count(*), count(pickup), coalesce(sum(pickup), 0)
    FROM finished
    GROUP BY 1, 2, 3
    ON CONFLICT (bucket, queue, state) DO UPDATE
        SET n = t.n + excluded.n, picked = t.picked + excluded.picked,
            pickup_sum = t.pickup_sum + excluded.pickup_sum
    RETURNING 1
),
totaled AS (  -- the all-time totals per queue and state (pgqueue.finished_totals)
    INSERT INTO pgqueue.finished_totals AS t (queue, state, n)
    SELECT queue, state, count(*)
    FROM finished
    GROUP BY 1, 2
    ON CONFLICT (queue, state) DO UPDATE SET n = t.n + excluded.n
),
binned AS (  -- runs whether or not the statement reads it
    INSERT INTO pgqueue.latency_tally AS t (bucket, queue, kind, bin, n, seconds)
    SELECT bucket, queue,
           CASE WHEN grouping(pickup_bin) = 0 THEN 'pickup' ELSE 'duration' END,
           coalesce(pickup_bin, duration_bin), count(*),
           CASE WHEN grouping(pickup_bin) = 0 THEN sum(pickup) ELSE sum(duration) END
    FROM (SELECT bucket, queue, pickup, duration,
                 pgqueue.latency_bin(pickup) AS pickup_bin,
                 pgqueue.latency_bin(duration) AS duration_bin
          FROM finished
          WHERE pickup IS NOT NULL) f
    GROUP BY GROUPING SETS ((bucket, queue, pickup_bin), (bucket, queue, duration_bin))
    ON CONFLICT (bucket, queue, kind, bin) DO UPDATE
        SET n = t.n + excluded.n, seconds = t.seconds + excluded.seconds
)
UPDATE pgqueue.tally_mark
SET upto = m.new
FROM mark m
WHERE m.new > m.old
RETURNING (SELECT count(*) FROM counted) AS buckets,
          m.new < now() - (%(lag_seconds)s + 5) * interval '1 second' AS behind
