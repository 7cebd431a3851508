-- A page of one group's unfinished runs, in any queue, newest (largest id) first, through
-- runs_live_group_idx (group_key, state, id) ({window}: every unfinished state, and
-- `group_key <> ''`, as the index's predicate says, so that a generic plan takes
-- it): the first section of a group's list with no state when that index exists (the
-- second is its finished runs, dashboard_runs_by_finish_group.sql). For each unfinished
-- state, a backward range of the index from the cursor, bounded by row comparisons as in
-- dashboard_runs_unfinished_task.sql; the newest %(scan)s of them are the page's
-- candidates, so the section is exact at any depth. The rows are then fetched by id and
-- the other filters (a queue among them) apply; the first row says where the scan ended.
WITH ids AS MATERIALIZED (
    SELECT x.id
    FROM unnest(ARRAY[{window}]::text[]) AS s (state)
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM pgqueue.runs r
        WHERE r.state IN ({window}) AND r.group_key <> ''
          AND r.group_key = %(group)s::text
          AND (r.state, r.id) >= (s.state, 0)
          AND (r.state, r.id) < (s.state, %(before_id)s::bigint)
        ORDER BY r.group_key DESC, r.state DESC, r.id DESC
        LIMIT %(scan)s
    ) x
    ORDER BY x.id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_ids}}
