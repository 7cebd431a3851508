-- A page of one group's runs in an unfinished state ({states}: one of them), in any queue,
-- newest (largest id) first, through runs_live_group_idx (group_key, state, id) ({window}:
-- every unfinished state, and `group_key <> ''`, as the index's predicate says, so
-- that a generic plan takes it): a backward range of the index from the cursor, bounded by
-- row comparisons as in dashboard_runs_live_task.sql, so every id read is of the group and
-- the state, and a page is full at any depth. The rows are then fetched by id and the
-- other filters (a queue among them) apply to at most %(scan)s of them; the first row
-- says where the scan ended.
WITH ids AS MATERIALIZED (
    SELECT id
    FROM pgqueue.runs
    WHERE state IN ({window}) AND group_key <> ''
      AND state IN ({states}) AND group_key = %(group)s::text
      AND (state, id) >= ({states}, 0) AND (state, id) < ({states}, %(before_id)s::bigint)
    ORDER BY group_key DESC, state DESC, id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_ids}}
