-- A page of the queued runs of one group of a limited queue (its runs flagged `limited`),
-- newest (largest id) first. Each priority the queue's queued runs have is found with one
-- probe of runs_claim_idx (a skip scan, as in dashboard_runs_queued_queue.sql); from each,
-- the group's newest %(scan)s ids after the cursor are a backward range of
-- runs_group_claim_idx (queue, priority, group_key, id), whose four columns the
-- conditions fix, so that every id read is of the group. The rows are then fetched by id and the other filters
-- apply; the first row says where the scan ended.
WITH RECURSIVE {{queued_priorities_of_queue}}
ids AS MATERIALIZED (
    SELECT x.id
    FROM prios p
    CROSS JOIN LATERAL (
        SELECT id
        FROM pgqueue.runs
        WHERE state = 'queued' AND limited AND queue = %(queue)s::text
          AND priority = p.priority AND group_key = %(group)s::text
          AND id < %(before_id)s::bigint
        ORDER BY queue DESC, priority DESC, group_key DESC, id DESC
        LIMIT %(scan)s
    ) x
    ORDER BY x.id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_ids}}
