-- A page of finished runs in {states} of one queue, most recently finished first. The
-- scan reads the queue's finished runs ({window}: every finished state, as the index's
-- predicate says, so that a generic plan takes runs_finished_queue_idx (queue, finished_at,
-- id) and not runs_failed_idx) from the cursor, so every run it reads is of the queue;
-- the state and the other filters apply to at most %(scan)s of them (a page costs the
-- same however rare their matches are). The range is bounded by row comparisons, not
-- `queue = ...`: with that, a generic plan may walk another index of finished runs in
-- finish order instead and filter the whole history (measured: 234 ms for 500 runs
-- behind 1,000,000, when runs_finished_idx (finished_at) existed).
-- The first row says where the scan ended.
WITH scanned AS MATERIALIZED (
    SELECT id, task, queue, state, group_key, priority, attempt, max_attempts, error,
           parent_id, run_at, created_at, started_at, finished_at, idempotency_key,
           cancel_reason, lease_expires_at, args, kwargs
    FROM pgqueue.runs
    WHERE state IN ({window})
      AND (queue, finished_at, id) >= (%(queue)s::text, '-infinity'::timestamptz, 0)
      AND (queue, finished_at, id) < (%(queue)s::text, %(before_at)s, %(before_id)s)
    ORDER BY queue DESC, finished_at DESC, id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_finish}}
