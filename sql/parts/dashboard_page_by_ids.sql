-- The page of a dashboard_runs_* statement whose CTE `ids` holds the ids it read after the
-- cursor (from an index keyed by its filter): those runs fetched by id, with the list's
-- columns, as the CTE `scanned` of parts/dashboard_page.sql.
scanned AS MATERIALIZED (
    SELECT id, task, queue, state, group_key, priority, attempt, max_attempts, error,
           parent_id, run_at, created_at, started_at, finished_at, idempotency_key,
           cancel_reason, lease_expires_at, args, kwargs
    FROM pgqueue.runs
    WHERE id = ANY (ARRAY(SELECT id FROM ids))
),
{{dashboard_page}}
