-- The CTE `prios` (after WITH RECURSIVE): each priority that queue %(queue)s has queued
-- runs at, in order, one descent of runs_claim_idx (queue, priority, id) each (a skip
-- scan: the backlog is never read run by run).
prios AS (
    (SELECT priority
     FROM pgqueue.runs
     WHERE state = 'queued' AND queue = %(queue)s::text
     ORDER BY queue, priority
     LIMIT 1)
    UNION ALL
    SELECT n.priority
    FROM prios p
    CROSS JOIN LATERAL (
        SELECT priority
        FROM pgqueue.runs
        WHERE state = 'queued' AND queue = %(queue)s::text AND priority > p.priority
        ORDER BY queue, priority
        LIMIT 1
    ) n
),
