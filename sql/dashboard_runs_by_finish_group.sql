-- A page of finished runs in {states} of one group, in any queue, most recently finished
-- first. The scan reads the group's finished runs ({window}: every finished state, and
-- `group_key <> ''`, as the index's predicate says, so that a generic plan takes
-- runs_finished_group_idx (group_key, finished_at, id) and not runs_failed_idx) from the
-- cursor, so every run it reads is of the group; the state and the other filters (a queue
-- among them) apply to at most %(scan)s of them. The range is bounded by row comparisons,
-- not `group_key = ...`, for the reason dashboard_runs_by_finish_task.sql gives. The first
-- row says where the scan ended.
WITH scanned AS MATERIALIZED (
    SELECT id, task, queue, state, group_key, priority, attempt, max_attempts, error,
           parent_id, run_at, created_at, started_at, finished_at, idempotency_key,
           cancel_reason, lease_expires_at, args, kwargs
    FROM pgqueue.runs
    WHERE state IN ({window}) AND group_key <> ''
      AND (group_key, finished_at, id) >= (%(group)s::text, '-infinity'::timestamptz, 0)
      AND (group_key, finished_at, id) < (%(group)s::text, %(before_at)s, %(before_id)s)
    ORDER BY group_key DESC, finished_at DESC, id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_finish}}
