-- A page of queued runs, newest (largest id) first, through runs_claim_idx (queue,
-- priority, id) without reading the whole backlog: each (queue, priority) the queued runs
-- have is found with one index probe (a skip scan), and from each the newest %(scan)s
-- ids after the cursor are read (a backward range of the index, bounded by row
-- comparisons: with `queue = ... AND priority = ...` the planner may take runs_pkey's id
-- order instead and walk the whole history backwards); the newest %(scan)s of
-- those are the page's candidates. A page costs about (queues x priorities in use) x
-- %(scan)s index entries, however long the backlog. The rows are then fetched by id and
-- filtered as in dashboard_runs_live.sql; the first row says where the scan ended.
WITH RECURSIVE pairs AS (
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
ids AS MATERIALIZED (
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
    ORDER BY x.id DESC
    LIMIT %(scan)s
),
scanned AS MATERIALIZED (
    SELECT id, task, queue, state, group_key, priority, attempt, max_attempts, error,
           parent_id, run_at, created_at, started_at, finished_at, idempotency_key
    FROM pgqueue.runs
    WHERE id = ANY (ARRAY(SELECT id FROM ids))
),
ended AS (
    SELECT count(*) AS scanned, min(id) AS last_id FROM scanned
)
SELECT e.scanned, NULL::timestamptz AS last_at, e.last_id, m.*
FROM ended e
LEFT JOIN LATERAL (
    SELECT s.id, s.task, s.queue, s.state, s.group_key, s.priority, s.attempt,
           s.max_attempts, s.error, s.parent_id, s.run_at, s.created_at, s.started_at,
           s.finished_at
    FROM scanned s
    WHERE (%(queue)s::text IS NULL OR s.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR s.task = %(task)s::text)
      AND (%(group)s::text IS NULL OR s.group_key = %(group)s::text)
      AND (%(q)s::text IS NULL OR s.id::text = %(q)s::text
           OR strpos(lower(s.task), lower(%(q)s::text)) > 0
           OR strpos(lower(s.group_key), lower(%(q)s::text)) > 0
           OR strpos(lower(coalesce(s.idempotency_key, '')), lower(%(q)s::text)) > 0
           OR strpos(lower(coalesce(s.error, '')), lower(%(q)s::text)) > 0)
    ORDER BY s.id DESC
    LIMIT %(limit)s
) m ON true
ORDER BY m.id DESC NULLS LAST
