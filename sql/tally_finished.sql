-- Fold the runs that finished between pgqueue.tally_mark and a few seconds ago into
-- pgqueue.finished_tally (counts by queue and state) and pgqueue.latency_tally (pickup
-- and duration histograms by queue), and move the mark: one worker at a time (the
-- others skip the locked mark), at most an hour of history per statement (a tally that
-- fell behind catches up over several). `lag_seconds` leaves out the runs whose
-- finishing transaction may not have committed yet (finished_at is its start). Reads
-- runs_finished_idx from the mark.
WITH mark AS (
    SELECT upto AS old,
           least(upto + interval '1 hour',
                 date_bin('5 seconds', now() - %(lag_seconds)s * interval '1 second',
                          timestamptz '2000-01-01 UTC')) AS new
    FROM pgqueue.tally_mark
    FOR UPDATE SKIP LOCKED
),
finished AS MATERIALIZED (
    SELECT date_bin('5 seconds', r.finished_at, timestamptz '2000-01-01 UTC') AS bucket,
           r.queue, r.state, r.run_at, r.started_at, r.finished_at
    FROM pgqueue.runs r, mark m
    WHERE r.state IN ('succeeded', 'failed', 'canceled')
      AND r.finished_at >= m.old AND r.finished_at < m.new
      AND r.finished_at >= pgqueue.tally_upto()  -- m.old or older: for the estimate
),
counted AS (
    INSERT INTO pgqueue.finished_tally AS t (bucket, queue, state, n, picked, pickup_sum)
    SELECT bucket, queue, state, count(*), count(started_at),
           coalesce(sum(extract(epoch FROM started_at - run_at)), 0)
    FROM finished
    GROUP BY 1, 2, 3
    ON CONFLICT (bucket, queue, state) DO UPDATE
        SET n = t.n + excluded.n, picked = t.picked + excluded.picked,
            pickup_sum = t.pickup_sum + excluded.pickup_sum
    RETURNING 1
),
binned AS (  -- runs whether or not the statement reads it
    INSERT INTO pgqueue.latency_tally AS t (bucket, queue, kind, bin, n, seconds)
    SELECT f.bucket, f.queue, l.kind, l.bin, count(*), sum(l.seconds)
    FROM finished f, pgqueue.latencies(f.run_at, f.started_at, f.finished_at) l
    WHERE f.started_at IS NOT NULL
    GROUP BY 1, 2, 3, 4
    ON CONFLICT (bucket, queue, kind, bin) DO UPDATE
        SET n = t.n + excluded.n, seconds = t.seconds + excluded.seconds
)
UPDATE pgqueue.tally_mark
SET upto = m.new
FROM mark m
WHERE m.new > m.old
RETURNING (SELECT count(*) FROM counted) AS buckets,
          m.new < now() - (%(lag_seconds)s + 5) * interval '1 second' AS behind
