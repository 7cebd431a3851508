-- Fold the runs that finished between pgqueue.tally_mark and a few seconds ago into
-- pgqueue.finished_tally, and move the mark: one worker at a time (the others skip the
-- locked mark), at most an hour of history per statement (a tally that fell behind
-- catches up over several). `lag_seconds` leaves out the runs whose finishing
-- transaction may not have committed yet (finished_at is its start). Reads
-- runs_finished_idx from the mark.
WITH mark AS (
    SELECT upto AS old,
           least(upto + interval '1 hour',
                 date_bin('5 seconds', now() - %(lag_seconds)s * interval '1 second',
                          timestamptz '2000-01-01 UTC')) AS new
    FROM pgqueue.tally_mark
    FOR UPDATE SKIP LOCKED
),
folded AS (
    INSERT INTO pgqueue.finished_tally AS t (bucket, queue, state, n, picked, pickup_sum)
    SELECT date_bin('5 seconds', r.finished_at, timestamptz '2000-01-01 UTC'), r.queue,
           r.state, count(*), count(r.started_at),
           coalesce(sum(extract(epoch FROM r.started_at - r.run_at)), 0)
    FROM pgqueue.runs r, mark m
    WHERE r.state IN ('succeeded', 'failed', 'canceled')
      AND r.finished_at >= m.old AND r.finished_at < m.new
      AND r.finished_at >= pgqueue.tally_upto()  -- m.old or older: for the estimate
    GROUP BY 1, 2, 3
    ON CONFLICT (bucket, queue, state) DO UPDATE
        SET n = t.n + excluded.n, picked = t.picked + excluded.picked,
            pickup_sum = t.pickup_sum + excluded.pickup_sum
    RETURNING 1
)
UPDATE pgqueue.tally_mark
SET upto = m.new
FROM mark m
WHERE m.new > m.old
RETURNING (SELECT count(*) FROM folded) AS buckets,
          m.new < now() - (%(lag_seconds)s + 5) * interval '1 second' AS behind
