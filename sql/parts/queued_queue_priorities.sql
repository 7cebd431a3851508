-- The CTE `pairs` (after WITH RECURSIVE): each (queue, priority) that has queued runs, in
-- order, one descent of runs_claim_idx (queue, priority, id) each (a skip scan: the
-- backlog is never read run by run).
pairs AS (
    (SELECT queue, priority
     FROM pgqueue.runs
     WHERE state = 'queued'
     ORDER BY queue, priority
     LIMIT 1)
    UNION ALL
    SELECT n.queue, n.priority
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT queue, priority
        FROM pgqueue.runs
        WHERE state = 'queued' AND (queue, priority) > (p.queue, p.priority)
        ORDER BY queue, priority
        LIMIT 1
    ) n
),
