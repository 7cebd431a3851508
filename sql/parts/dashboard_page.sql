-- The page of a dashboard_runs_* statement, from its CTE `scanned` (the runs read after
-- the cursor, with the list's columns): those that match the filters, newest first, at
-- most %(limit)s (`state`: for a list whose index is not keyed by the state; `arg`: a
-- JSON value the run's arguments contain, parts/dashboard_arg_pattern.sql), each row
-- also saying how many runs were read and the last id read (the next page starts there
-- when fewer than %(limit)s matched). Without a match, one row of
-- NULLs but for those two.
ended AS (
    SELECT count(*) AS scanned, min(id) AS last_id FROM scanned
)
SELECT e.scanned, NULL::timestamptz AS last_at, e.last_id, m.*
FROM ended e
LEFT JOIN LATERAL (
    SELECT s.id, s.task, s.queue, s.state, s.group_key, s.priority, s.attempt,
           s.max_attempts, s.error, s.parent_id, s.run_at, s.created_at, s.started_at,
           s.finished_at, s.cancel_reason
    FROM scanned s
    WHERE (%(queue)s::text IS NULL OR s.queue = %(queue)s::text)
      AND (%(state)s::text IS NULL OR s.state = %(state)s::text)
      AND (%(task)s::text IS NULL OR s.task = %(task)s::text)
      AND (%(group)s::text IS NULL OR s.group_key = %(group)s::text)
      AND (%(error_class)s::text IS NULL
           OR split_part(split_part(coalesce(s.error, ''), E'\n', 1), ':', 1)
              = %(error_class)s::text)
      AND (%(arg)s::jsonb IS NULL OR (s.args || s.kwargs) @> ({{dashboard_arg_pattern}}))
      AND (%(q)s::text IS NULL OR s.id::text = %(q)s::text
           OR strpos(lower(s.task), lower(%(q)s::text)) > 0
           OR strpos(lower(s.group_key), lower(%(q)s::text)) > 0
           OR strpos(lower(coalesce(s.idempotency_key, '')), lower(%(q)s::text)) > 0
           OR strpos(lower(coalesce(s.error, '')), lower(%(q)s::text)) > 0)
    ORDER BY s.id DESC
    LIMIT %(limit)s
) m ON true
ORDER BY m.id DESC NULLS LAST
