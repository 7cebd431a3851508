-- A page of finished runs in {states}, most recently finished first. The scan reads the
-- finished runs in {window} (runs_finished_idx, or runs_failed_idx for failed runs alone)
-- by finish time after the cursor, at most %(scan)s of them, then filters: a page costs
-- the same however rare its matches are. The first row also says where the scan ended.
WITH scanned AS (
    SELECT id, finished_at FROM pgqueue.runs
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
    SELECT r.id, r.task, r.queue, r.state, r.group_key, r.priority, r.attempt,
           r.max_attempts, r.error, r.parent_id, r.run_at, r.created_at, r.started_at,
           r.finished_at
    FROM scanned s JOIN pgqueue.runs r ON r.id = s.id
    WHERE r.state IN ({states})
      AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR r.task = %(task)s::text)
      AND (%(group)s::text IS NULL OR r.group_key = %(group)s::text)
      AND (%(q)s::text IS NULL OR r.id::text = %(q)s::text
           OR strpos(lower(r.task), lower(%(q)s::text)) > 0
           OR strpos(lower(r.group_key), lower(%(q)s::text)) > 0
           OR strpos(lower(coalesce(r.idempotency_key, '')), lower(%(q)s::text)) > 0
           OR strpos(lower(coalesce(r.error, '')), lower(%(q)s::text)) > 0)
    ORDER BY r.finished_at DESC, r.id DESC
    LIMIT %(limit)s
) m ON true
ORDER BY m.finished_at DESC NULLS LAST, m.id DESC
