-- The queues that have finished runs, in order, as a subquery of one column `queue`: a
-- loose index scan of runs_finished_queue_idx (queue, finished_at, id), one descent per
-- queue (PostgreSQL 15 has no skip scan). A statement that reads finished runs by time
-- reads that index one queue at a time from here (a LATERAL on (queue, finished_at)):
-- the index of finished runs that every completion writes is this one alone.
(WITH RECURSIVE walk(queue) AS (
     SELECT min(f.queue) FROM pgqueue.runs f
     WHERE f.state IN ('succeeded', 'failed', 'canceled')
     UNION ALL
     SELECT (SELECT min(f.queue) FROM pgqueue.runs f
             WHERE f.state IN ('succeeded', 'failed', 'canceled') AND f.queue > w.queue)
     FROM walk w
     WHERE w.queue IS NOT NULL
 )
 SELECT queue FROM walk WHERE queue IS NOT NULL)
