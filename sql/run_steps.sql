-- Steps of a run for inspection (`pgqueue runs show`, the dashboard's run page). A step that
-- waited (an event, a sleep, a child) has `waited` (its spec) and waited_seconds, from the
-- start of the wait to its end (or to now while it waits).
SELECT name, state, attempt, created_at, started_at, finished_at,
       extract(epoch FROM finished_at - started_at)::double precision AS seconds,
       octet_length(output::text) AS output_bytes, error, waited,
       CASE WHEN waited IS NOT NULL
            THEN extract(epoch FROM coalesce(finished_at, now()) - created_at)::double precision
       END AS waited_seconds
FROM pgqueue.steps
WHERE run_id = %(id)s
ORDER BY created_at, name
