-- A page of runs in an unfinished state ({states}), newest (largest id) first. The ids
-- come from the partial index of the state, sorted there (`id + 0`: not in primary-key
-- order, which would walk the whole history backwards to find an old backlog), at most
-- %(scan)s of them after the cursor; the rows are then fetched by id, and the filters
-- apply to those, so a page costs the same however rare its matches are. The first row
-- also says where the scan ended: the next page starts there when fewer than %(limit)s
-- runs matched.
WITH ids AS MATERIALIZED (
    SELECT id
    FROM pgqueue.runs
    WHERE state IN ({states}) AND id < %(before_id)s
    ORDER BY id + 0 DESC
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
