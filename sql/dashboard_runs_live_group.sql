-- A page of one group's runs in an unfinished state (%(state)s) of a limited queue (its
-- runs flagged `limited`), newest (largest id) first, through runs_group_order_idx
-- (queue, group_key, id) ({window}: every unfinished state, as the index's predicate
-- says): a backward range of the index from the cursor, so every id read is of the queue
-- and the group. The state is not in the index's key: it and the other filters apply to
-- at most %(scan)s of the group's unfinished runs a page (a group's running and waiting
-- runs are few: its concurrency; its queued ones come through runs_group_claim_idx,
-- dashboard_runs_queued_group.sql). The first row says where the scan ended.
WITH ids AS MATERIALIZED (
    SELECT id
    FROM pgqueue.runs
    WHERE limited AND state IN ({window})
      AND queue = %(queue)s::text AND group_key = %(group)s::text AND id < %(before_id)s
    ORDER BY queue DESC, group_key DESC, id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_ids}}
