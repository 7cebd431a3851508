-- A page of finished runs in {states}, most recently finished first. The scan reads the
-- finished runs in {window} (runs_finished_idx, or runs_failed_idx for failed runs alone)
-- by finish time after the cursor, at most %(scan)s of them, then filters: a page costs
-- the same however rare its matches are. The first row also says where the scan ended.
WITH scanned AS MATERIALIZED (
    SELECT id, task, queue, state, group_key, priority, attempt, max_attempts, error,
           parent_id, run_at, created_at, started_at, finished_at, idempotency_key
    FROM pgqueue.runs
    WHERE state IN ({window})
      AND finished_at <= %(before_at)s
      AND (finished_at, id) < (%(before_at)s, %(before_id)s)
    ORDER BY finished_at DESC, id DESC
    LIMIT %(scan)s
),
ended AS (
    SELECT (SELECT count(*) FROM scanned) AS scanned, x.finished_at AS last_at,
           x.id AS last_id
    FROM (SELECT 1) one
    LEFT JOIN (SELECT finished_at, id FROM scanned ORDER BY finished_at, id LIMIT 1) x ON true
)
SELECT e.scanned, e.last_at, e.last_id, m.*
FROM ended e
LEFT JOIN LATERAL (
    SELECT s.id, s.task, s.queue, s.state, s.group_key, s.priority, s.attempt,
           s.max_attempts, s.error, s.parent_id, s.run_at, s.created_at, s.started_at,
           s.finished_at
    FROM scanned s
    WHERE (%(queue)s::text IS NULL OR s.queue = %(queue)s::text)
      AND s.state IN ({states})
      AND (%(task)s::text IS NULL OR s.task = %(task)s::text)
      AND (%(group)s::text IS NULL OR s.group_key = %(group)s::text)
      AND (%(q)s::text IS NULL OR s.id::text = %(q)s::text
           OR strpos(lower(s.task), lower(%(q)s::text)) > 0
           OR strpos(lower(s.group_key), lower(%(q)s::text)) > 0
           OR strpos(lower(coalesce(s.idempotency_key, '')), lower(%(q)s::text)) > 0
           OR strpos(lower(coalesce(s.error, '')), lower(%(q)s::text)) > 0)
    ORDER BY s.finished_at DESC, s.id DESC
    LIMIT %(limit)s
) m ON true
ORDER BY m.finished_at DESC NULLS LAST, m.id DESC
