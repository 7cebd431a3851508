-- A page of runs of every state ({states}: psycopg.sql literals, as in the other
-- dashboard_runs_* files), newest (largest id) first, along the primary key. At most
-- %(scan)s runs are read after the cursor; the filters apply to those, so a page costs
-- the same however rare its matches are. The first row also says where the scan ended:
-- the next page starts there when fewer than %(limit)s runs matched.
WITH scanned AS MATERIALIZED (
    SELECT id, task, queue, state, group_key, priority, attempt, max_attempts, error,
           parent_id, run_at, created_at, started_at, finished_at, idempotency_key,
           cancel_reason, lease_expires_at, args, kwargs
    FROM pgqueue.runs
    WHERE state IN ({states}) AND id < %(before_id)s
    ORDER BY id DESC
    LIMIT %(scan)s
),
{{dashboard_page}}
