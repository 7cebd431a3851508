-- For queued runs of limited queues among %(ids)s: how many queued runs of the same
-- group come before each (priority, then id: the order claim_limited() takes a group's
-- runs in, its turns going round the groups), counted up to 101 through
-- runs_group_claim_idx (queue, priority, group_key, id). The runs asked about are read
-- by primary key first (MATERIALIZED): left to the planner, it read them by filtering
-- every entry of runs_group_claim_idx (25,000 for a queue of 25,000 queued runs).
WITH r AS MATERIALIZED (
    SELECT id, queue, group_key, priority
    FROM pgqueue.runs
    WHERE id = ANY (%(ids)s::bigint[]) AND state = 'queued' AND limited
)
SELECT r.id,
       (SELECT count(*)
          FROM (SELECT 1
                  FROM pgqueue.runs a
                 WHERE a.state = 'queued' AND a.limited AND a.queue = r.queue
                   AND a.group_key = r.group_key
                   AND (a.priority < r.priority OR (a.priority = r.priority AND a.id < r.id))
                 LIMIT 101) x) AS group_ahead
FROM r
