-- Finished runs per 5-second bucket, queue and state: the workers' tally
-- (pgqueue.finished_tally, migration 0017) up to pgqueue.tally_mark, and after it the
-- runs themselves (runs_finished_queue_idx from the mark, queue by queue: a few seconds
-- of runs while workers keep the tally). The queues come from a loose scan of that index
-- (`walk`, as sql/parts/finished_queues.sql, written out: a view's text is loaded as
-- written). `picked` runs had started; pickup_sum / picked is their mean pickup latency
-- (started_at - run_at) in seconds.
CREATE OR REPLACE VIEW pgqueue.finished_buckets AS
SELECT t.bucket, t.queue, t.state, t.n, t.picked, t.pickup_sum
FROM pgqueue.finished_tally t
UNION ALL
SELECT date_bin('5 seconds', r.finished_at, timestamptz '2000-01-01 UTC') AS bucket,
       q.queue, r.state, count(*) AS n, count(r.started_at) AS picked,
       coalesce(sum(extract(epoch FROM r.started_at - r.run_at)), 0)::double precision
           AS pickup_sum
FROM (WITH RECURSIVE walk(queue) AS (
          SELECT min(f.queue) FROM pgqueue.runs f
          WHERE f.state IN ('succeeded', 'failed', 'canceled')
          UNION ALL
          SELECT (SELECT min(f.queue) FROM pgqueue.runs f
                  WHERE f.state IN ('succeeded', 'failed', 'canceled') AND f.queue > w.queue)
          FROM walk w
          WHERE w.queue IS NOT NULL
      )
      SELECT queue FROM walk WHERE queue IS NOT NULL) q
CROSS JOIN LATERAL (
    SELECT r.state, r.run_at, r.started_at, r.finished_at
    FROM pgqueue.runs r
    WHERE r.state IN ('succeeded', 'failed', 'canceled')
      AND r.queue = q.queue
      AND r.finished_at >= pgqueue.tally_upto()
) r
GROUP BY 1, 2, 3;
