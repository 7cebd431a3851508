-- For queued runs of limited queues among %(ids)s: how many queued runs of the same
-- group come before each (priority, then id: the order claim_limited() takes a group's
-- runs in, its turns going round the groups), counted up to 101 through
-- runs_group_claim_idx (queue, priority, group_key, id), one range of it per priority
-- of the queue up to the run's own (`pairs`: a skip scan of the queued runs' queues and
-- priorities), each range bounded by the run's id in its own priority. Written as one
-- range with `priority < ... OR`, the scan started at the queue's first entry and
-- filtered out the other groups (0.17 ms a run with 200 groups). The runs asked about
-- are read first, by primary key alone (MATERIALIZED, and the state and `limited` tests
-- outside it: inside, PostgreSQL 18 read the whole of runs_group_claim_idx instead).
WITH RECURSIVE {{queued_queue_priorities}}
r AS MATERIALIZED (
    SELECT id, queue, group_key, priority, state, limited
    FROM pgqueue.runs
    WHERE id = ANY (%(ids)s::bigint[])
)
SELECT r.id,
       (SELECT count(*)
          FROM (SELECT 1
                  FROM pairs p
                  CROSS JOIN LATERAL (
                      SELECT 1
                      FROM pgqueue.runs a
                      WHERE a.state = 'queued' AND a.limited AND a.queue = p.queue
                        AND a.priority = p.priority AND a.group_key = r.group_key
                        AND a.id < CASE WHEN p.priority < r.priority
                                        THEN 9223372036854775807 ELSE r.id END
                      LIMIT 101) z
                 WHERE p.queue = r.queue AND p.priority <= r.priority
                 LIMIT 101) y) AS group_ahead
FROM r
WHERE r.state = 'queued' AND r.limited
