-- Finished runs per 5-second bucket, queue and state: the workers' tally
-- (pgqueue.finished_tally, migration 0017) up to pgqueue.tally_mark, and after it the
-- runs themselves (runs_finished_idx from the mark: a few seconds of runs while workers
-- keep the tally). `picked` runs had started; pickup_sum / picked is their mean pickup
-- latency (started_at - run_at) in seconds.
CREATE OR REPLACE VIEW pgqueue.finished_buckets AS
SELECT t.bucket, t.queue, t.state, t.n, t.picked, t.pickup_sum
FROM pgqueue.finished_tally t
UNION ALL
SELECT date_bin('5 seconds', r.finished_at, timestamptz '2000-01-01 UTC') AS bucket,
       r.queue, r.state, count(*) AS n, count(r.started_at) AS picked,
       coalesce(sum(extract(epoch FROM r.started_at - r.run_at)), 0)::double precision
           AS pickup_sum
FROM pgqueue.runs r
WHERE r.state IN ('succeeded', 'failed', 'canceled')
  AND r.finished_at >= pgqueue.tally_upto()
GROUP BY 1, 2, 3;
