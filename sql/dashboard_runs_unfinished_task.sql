-- A page of one task's unfinished runs, newest (largest id) first, through
-- runs_live_task_idx (task, state, id) ({window}: every unfinished state, as the index's
-- predicate says, so that a generic plan takes it): the first section of a task's list
-- with no state when that index exists (the second is its finished runs,
-- dashboard_runs_by_finish_task.sql). For each unfinished state, a backward range of the
-- index from the cursor (every id read is of the task), bounded by row comparisons (with
-- `state = ...` the planner may take runs_pkey's id order instead and walk the whole
-- history backwards, as dashboard_runs_queued.sql says); the newest %(scan)s of them are
-- the page's candidates, so the section is exact at any depth. The rows are then fetched
-- by id and the other filters apply; the first row says where the scan ended.
WITH ids AS MATERIALIZED (
    SELECT x.id
    FROM unnest(ARRAY[{window}]::text[]) AS s (state)
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM pgqueue.runs r
        WHERE r.state IN ({window}) AND r.task = %(task)s::text
          AND (r.state, r.id) >= (s.state, 0)
          AND (r.state, r.id) < (s.state, %(before_id)s::bigint)
        ORDER BY r.task DESC, r.state DESC, r.id DESC
        LIMIT %(scan)s
    ) x
    ORDER BY x.id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_ids}}
