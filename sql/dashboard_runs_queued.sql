-- A page of queued runs, newest (largest id) first, through runs_claim_idx (queue,
-- priority, id) without reading the whole backlog: each (queue, priority) the queued runs
-- have is found with one index probe (a skip scan), and from each the newest %(scan)s
-- ids after the cursor are read (a backward range of the index, bounded by row
-- comparisons: with `queue = ... AND priority = ...` the planner may take runs_pkey's id
-- order instead and walk the whole history backwards); the newest %(scan)s of
-- those are the page's candidates. A page costs about (queues x priorities in use) x
-- %(scan)s index entries, however long the backlog. The rows are then fetched by id and
-- filtered as in dashboard_runs_live.sql; the first row says where the scan ended.
WITH RECURSIVE pairs AS (
    (SELECT queue, priority
     FROM pgqueue.runs
     WHERE state = 'queued'
     ORDER BY queue, priority
     LIMIT 1)
    UNION ALL
    SELECT n.queue, n.priority
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT queue, priority
        FROM pgqueue.runs
        WHERE state = 'queued' AND (queue, priority) > (p.queue, p.priority)
        ORDER BY queue, priority
        LIMIT 1
    ) n
),
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
scanned AS MATERIALIZED (
    SELECT id, task, queue, state, group_key, priority, attempt, max_attempts, error,
           parent_id, run_at, created_at, started_at, finished_at, idempotency_key,
           cancel_reason, lease_expires_at, args, kwargs
    FROM pgqueue.runs
    WHERE id = ANY (ARRAY(SELECT id FROM ids))
),
{{dashboard_page}}
