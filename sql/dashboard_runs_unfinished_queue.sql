-- A page of one queue's unfinished runs, newest (largest id) first: the first section of
-- a queue's list with no state (the second is its finished runs,
-- dashboard_runs_by_finish_queue.sql). Each state's ids come from that state's partial
-- index, keyed by queue, so that every id read is of the queue: the queued ones through
-- runs_claim_idx (queue, priority, id), one priority at a time (a skip scan, as in
-- dashboard_runs_queued_queue.sql: a backward range of each from the cursor); the
-- scheduled, running and waiting ones through runs_scheduled_idx, runs_lease_idx and
-- runs_wait_deadline_idx (queue, ...), sorted there (`id + 0`, as in
-- dashboard_runs_live_queue.sql). The newest %(scan)s of them after the cursor are the
-- page's candidates, every one of the queue, so the section is exact at any depth; the
-- rows are then fetched by id and the other filters apply. The first row says where the
-- scan ended.
WITH RECURSIVE {{queued_priorities_of_queue}}
ids AS MATERIALIZED (
    SELECT u.id
    FROM (
        SELECT x.id
        FROM prios p
        CROSS JOIN LATERAL (
            SELECT id
            FROM pgqueue.runs
            WHERE state = 'queued' AND queue = %(queue)s::text
              AND (priority, id) >= (p.priority, 0)
              AND (priority, id) < (p.priority, %(before_id)s::bigint)
            ORDER BY queue DESC, priority DESC, id DESC
            LIMIT %(scan)s
        ) x
        UNION ALL
        (SELECT id
         FROM pgqueue.runs
         WHERE state = 'scheduled' AND queue = %(queue)s::text AND id + 0 < %(before_id)s
         ORDER BY id + 0 DESC
         LIMIT %(scan)s)
        UNION ALL
        (SELECT id
         FROM pgqueue.runs
         WHERE state = 'running' AND queue = %(queue)s::text AND id + 0 < %(before_id)s
         ORDER BY id + 0 DESC
         LIMIT %(scan)s)
        UNION ALL
        (SELECT id
         FROM pgqueue.runs
         WHERE state = 'waiting' AND queue = %(queue)s::text AND id + 0 < %(before_id)s
         ORDER BY id + 0 DESC
         LIMIT %(scan)s)
    ) u
    ORDER BY u.id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_ids}}
