-- All-time finished runs per queue and state: the totals the workers' tally keeps
-- (pgqueue.finished_totals, sql/tally_finished.sql) and the runs finished after its
-- mark (runs_finished_queue_idx from pgqueue.tally_upto(), queue by queue: the few
-- seconds the tally trails by). Never a count of the history.
SELECT queue, state, sum(n)::bigint AS n
FROM (SELECT queue, state, n FROM pgqueue.finished_totals
      UNION ALL
      SELECT q.queue, r.state, count(*)
      FROM {{finished_queues}} q
      CROSS JOIN LATERAL (
          SELECT r.state
          FROM pgqueue.runs r
          WHERE r.state IN ('succeeded', 'failed', 'canceled')
            AND r.queue = q.queue
            AND r.finished_at >= pgqueue.tally_upto()
      ) r
      GROUP BY 1, 2) t
GROUP BY queue, state
