-- A page of finished runs in {states}, most recently finished first (failed runs alone:
-- dashboard_runs_by_finish_failed.sql). The scan reads the finished runs ({window}) by
-- finish time after the cursor, at most %(scan)s of them, then filters: a page costs
-- the same however rare its matches are. They come from runs_finished_queue_idx queue by
-- queue (a loose scan of its queues, sql/parts/finished_queues.sql): each queue's next
-- %(scan)s keys (finished_at, id) from the index alone, merged, the first %(scan)s of
-- them kept and only those runs fetched by id. Each queue's range is bounded by row
-- comparisons, not `queue = ...` (as in dashboard_runs_by_finish_queue.sql): with that, a
-- generic plan may take the whole queue from the index in a bitmap and sort it. The
-- first row also says where the scan ended.
WITH keys AS (
    SELECT k.id
    FROM {{finished_queues}} q
    CROSS JOIN LATERAL (
        SELECT r.finished_at, r.id
        FROM pgqueue.runs r
        WHERE r.state IN ({window})
          AND (r.queue, r.finished_at, r.id) >= (q.queue, '-infinity'::timestamptz, 0)
          AND (r.queue, r.finished_at, r.id) < (q.queue, %(before_at)s, %(before_id)s)
        ORDER BY r.queue DESC, r.finished_at DESC, r.id DESC
        LIMIT %(scan)s
    ) k
    ORDER BY k.finished_at DESC, k.id DESC
    LIMIT %(scan)s
),
scanned AS MATERIALIZED (
    SELECT id, task, queue, state, group_key, priority, attempt, max_attempts, error,
           parent_id, run_at, created_at, started_at, finished_at, idempotency_key,
           cancel_reason, lease_expires_at, args, kwargs
    FROM pgqueue.runs
    WHERE id = ANY (ARRAY(SELECT id FROM keys))
    ORDER BY finished_at DESC, id DESC
),
{{dashboard_page_by_finish}}
