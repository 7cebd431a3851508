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
{{dashboard_page_by_ids}}
