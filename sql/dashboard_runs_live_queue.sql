-- A page of one queue's runs in an unfinished state ({states}), newest (largest id)
-- first: the ids come from the partial index of the state, which is keyed by queue
-- (runs_scheduled_idx, runs_lease_idx, runs_wait_deadline_idx), so every id read is of
-- the queue; sorted there (`id + 0`, the cursor too, as in dashboard_runs_live.sql), at
-- most %(scan)s after the cursor. The rows are then fetched by id and the other filters
-- apply.
WITH ids AS MATERIALIZED (
    SELECT id
    FROM pgqueue.runs
    WHERE state IN ({states}) AND queue = %(queue)s::text AND id + 0 < %(before_id)s
    ORDER BY id + 0 DESC
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
