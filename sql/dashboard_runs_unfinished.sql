-- A page of the unfinished runs of every queue, newest (largest id) first: the first
-- section of a task's list with no state when runs_live_task_idx does not exist (the
-- second is the task's finished runs, dashboard_runs_by_finish_task.sql, exact). No index
-- has the task, so the task is a filter of what is read, bounded: the queued runs come
-- through runs_claim_idx one (queue, priority) at a time (a skip scan, as in
-- dashboard_runs_queued.sql), the newest %(scan)s ids after the cursor of each; the
-- scheduled, running and waiting ones through their partial indexes, sorted there
-- (`id + 0`, as in dashboard_runs_live.sql). The newest %(scan)s of them are read, the
-- rows fetched by id and the filters applied to those; the first row says where the scan
-- ended (the section ends when fewer than %(scan)s were read).
WITH RECURSIVE {{queued_queue_priorities}}
ids AS MATERIALIZED (
    SELECT u.id
    FROM (
        SELECT x.id
        FROM pairs p
        CROSS JOIN LATERAL (
            SELECT id
            FROM pgqueue.runs
            WHERE state = 'queued'
              AND (queue, priority) >= (p.queue, p.priority)
              AND (queue, priority, id) < (p.queue, p.priority, %(before_id)s::bigint)
            ORDER BY queue DESC, priority DESC, id DESC
            LIMIT %(scan)s
        ) x
        UNION ALL
        (SELECT id
         FROM pgqueue.runs
         WHERE state = 'scheduled' AND id + 0 < %(before_id)s
         ORDER BY id + 0 DESC
         LIMIT %(scan)s)
        UNION ALL
        (SELECT id
         FROM pgqueue.runs
         WHERE state = 'running' AND id + 0 < %(before_id)s
         ORDER BY id + 0 DESC
         LIMIT %(scan)s)
        UNION ALL
        (SELECT id
         FROM pgqueue.runs
         WHERE state = 'waiting' AND id + 0 < %(before_id)s
         ORDER BY id + 0 DESC
         LIMIT %(scan)s)
    ) u
    ORDER BY u.id DESC
    LIMIT %(scan)s
),
{{dashboard_page_by_ids}}
