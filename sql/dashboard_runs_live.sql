-- A page of runs in an unfinished state ({states}), newest (largest id) first. The ids
-- come from the partial index of the state, sorted there (`id + 0`: not in primary-key
-- order, which would walk the whole history backwards to find an old backlog; the cursor
-- too, or a generic plan takes runs_pkey's range from it and filters), at most
-- %(scan)s of them after the cursor; the rows are then fetched by id, and the filters
-- apply to those, so a page costs the same however rare its matches are. The first row
-- also says where the scan ended: the next page starts there when fewer than %(limit)s
-- runs matched.
WITH ids AS MATERIALIZED (
    SELECT id
    FROM pgqueue.runs
    WHERE state IN ({states}) AND id + 0 < %(before_id)s
    ORDER BY id + 0 DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_ids}}
