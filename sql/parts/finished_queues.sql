-- The queues that have finished runs, as a subquery of one column `queue`, last name
-- first: a loose index scan of runs_finished_queue_idx (queue, finished_at, id), one
-- descent per queue (PostgreSQL 15 has no skip scan). A statement that reads finished
-- runs by time reads that index one queue at a time from here (a LATERAL on (queue,
-- finished_at)): the index of finished runs that every completion writes is this one.
-- The walk goes down (max below the last queue): each descent lands on the newest
-- entries of the next queue. Going up, it landed on the oldest, which is where pruned
-- runs leave their dead entries until a vacuum, and walked them all (0.4 to 0.95 s of a
-- pruner's round at every worker start in bench.ab, two processes).
(WITH RECURSIVE walk(queue) AS (
     SELECT max(f.queue) FROM pgqueue.runs f
     WHERE f.state IN ('succeeded', 'failed', 'canceled')
     UNION ALL
     SELECT (SELECT max(f.queue) FROM pgqueue.runs f
             WHERE f.state IN ('succeeded', 'failed', 'canceled') AND f.queue < w.queue)
     FROM walk w
     WHERE w.queue IS NOT NULL
 )
 SELECT queue FROM walk WHERE queue IS NOT NULL)
