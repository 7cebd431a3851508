-- Steps of a run for inspection (`pgqueue runs show`).
SELECT name, state, attempt, created_at, started_at, finished_at,
       extract(epoch FROM finished_at - started_at)::double precision AS seconds,
       octet_length(output::text) AS output_bytes, error
FROM pgqueue.steps
WHERE run_id = %(id)s
ORDER BY created_at, name
