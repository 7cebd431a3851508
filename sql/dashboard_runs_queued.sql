-- A page of queued runs, newest (largest id) first, through runs_claim_idx (queue,
-- priority, id) without reading the whole backlog: each (queue, priority) the queued runs
-- have is found with one index probe (a skip scan), and from each the newest %(scan)s
-- ids after the cursor are read (a backward range of the index, bounded by row
-- comparisons: with `queue = ... AND priority = ...` the planner may take runs_pkey's id
-- order instead and walk the whole history backwards); the newest %(scan)s of
-- those are the page's candidates. A page costs about (queues x priorities in use) x
-- %(scan)s index entries, however long the backlog. The rows are then fetched by id and
-- filtered as in dashboard_runs_live.sql; the first row says where the scan ended.
WITH RECURSIVE {{queued_queue_priorities}}
ids AS MATERIALIZED (
    SELECT x.id
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT id
        FROM pgqueue.runs
        WHERE state = 'queued'
          AND (queue, priority) >= (p.queue, p.priority)
          AND (queue, priority, id) < (p.queue, p.priority, %(before_id)s::bigint)
        ORDER BY queue DESC, priority DESC, id DESC
        LIMIT %(scan)s
    ) x
    ORDER BY x.id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_ids}}
