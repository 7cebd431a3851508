-- A page of one task's runs in an unfinished state ({states}: one of them), newest
-- (largest id) first, through runs_live_task_idx (task, state, id) ({window}: every
-- unfinished state, as the index's predicate says, so that a generic plan takes it): a
-- backward range of the index from the cursor, bounded by row comparisons (with `id <
-- ...` a generic plan may walk runs_pkey backwards from the cursor instead), so every id
-- read is of the task and the state, and a page is full at any depth. The rows are then fetched by id and the other
-- filters apply to at most %(scan)s of them, as in dashboard_runs_live.sql; the first
-- row says where the scan ended.
WITH ids AS MATERIALIZED (
    SELECT id
    FROM pgqueue.runs
    WHERE state IN ({window}) AND state IN ({states}) AND task = %(task)s::text
      AND (state, id) >= ({states}, 0) AND (state, id) < ({states}, %(before_id)s::bigint)
    ORDER BY task DESC, state DESC, id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_ids}}
