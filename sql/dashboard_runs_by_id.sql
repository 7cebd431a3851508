-- A page of runs, newest (largest id) first, for runs in {states} (psycopg.sql literals
-- from a fixed list, so that the planner sees which partial index applies). At most
-- %(scan)s runs are read after the cursor; the filters apply to those, so a page costs
-- the same however rare its matches are. The first row also says where the scan ended:
-- the next page starts there when fewer than %(limit)s runs matched.
WITH scanned AS (
    SELECT id FROM pgqueue.runs
    WHERE state IN ({states}) AND id < %(before_id)s
    ORDER BY id DESC
    LIMIT %(scan)s
),
ended AS (
    SELECT count(*) AS scanned, min(id) AS last_id FROM scanned
)
SELECT e.scanned, NULL::timestamptz AS last_at, e.last_id, m.*
FROM ended e
LEFT JOIN LATERAL (
    SELECT r.id, r.task, r.queue, r.state, r.group_key, r.priority, r.attempt,
           r.max_attempts, r.error, r.parent_id, r.run_at, r.created_at, r.started_at,
           r.finished_at
    FROM scanned s JOIN pgqueue.runs r ON r.id = s.id
    WHERE (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR r.task = %(task)s::text)
      AND (%(group)s::text IS NULL OR r.group_key = %(group)s::text)
      AND (%(q)s::text IS NULL OR r.id::text = %(q)s::text
           OR strpos(lower(r.task), lower(%(q)s::text)) > 0
           OR strpos(lower(r.group_key), lower(%(q)s::text)) > 0
           OR strpos(lower(coalesce(r.idempotency_key, '')), lower(%(q)s::text)) > 0
           OR strpos(lower(coalesce(r.error, '')), lower(%(q)s::text)) > 0)
    ORDER BY r.id DESC
    LIMIT %(limit)s
) m ON true
ORDER BY m.id DESC NULLS LAST
