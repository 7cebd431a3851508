-- A page of failed runs, most recently finished first. The scan reads the failed runs
-- (runs_failed_idx) by finish time after the cursor, at most %(scan)s of them, then
-- filters: a page costs the same however rare its matches are. The first row also says
-- where the scan ended.
WITH scanned AS MATERIALIZED (
    SELECT id, task, queue, state, group_key, priority, attempt, max_attempts, error,
           parent_id, run_at, created_at, started_at, finished_at, idempotency_key,
           cancel_reason, lease_expires_at, args, kwargs
    FROM pgqueue.runs
    WHERE state = 'failed'
      AND finished_at <= %(before_at)s
      AND (finished_at, id) < (%(before_at)s, %(before_id)s)
    ORDER BY finished_at DESC, id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_finish}}
