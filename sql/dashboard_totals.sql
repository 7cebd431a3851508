-- All-time finished runs per queue and state: the totals the workers' tally keeps
-- (pgqueue.finished_totals, sql/tally_finished.sql) and the runs finished after its
-- mark (runs_finished_idx from pgqueue.tally_upto(): the few seconds the tally trails
-- by). Never a count of the history.
SELECT queue, state, sum(n)::bigint AS n
FROM (SELECT queue, state, n FROM pgqueue.finished_totals
      UNION ALL
      SELECT queue, state, count(*)
      FROM pgqueue.runs
      WHERE state IN ('succeeded', 'failed', 'canceled')
        AND finished_at >= pgqueue.tally_upto()
      GROUP BY queue, state) t
GROUP BY queue, state
