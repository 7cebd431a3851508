-- A page of one queue's queued runs, newest (largest id) first, through runs_claim_idx
-- (queue, priority, id): each priority the queue's queued runs have is found with one
-- index probe (a skip scan), and from each the newest %(scan)s ids after the cursor are
-- read (a backward range of the index); the newest %(scan)s of those are the page's
-- candidates, every one of them in the queue. The rows are then fetched by id and
-- filtered as in dashboard_runs_live.sql; the first row says where the scan ended.
WITH RECURSIVE {{queued_priorities_of_queue}}
ids AS MATERIALIZED (
    SELECT x.id
    FROM prios p
    CROSS JOIN LATERAL (
        SELECT id
        FROM pgqueue.runs
        WHERE state = 'queued' AND queue = %(queue)s::text
          AND (priority, id) >= (p.priority, 0)
          AND (priority, id) < (p.priority, %(before_id)s::bigint)
        ORDER BY queue DESC, priority DESC, id DESC
        LIMIT %(scan)s
    ) x
    ORDER BY x.id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_ids}}
