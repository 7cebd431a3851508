-- Every recorded step of a run, with the database clock (for durable sleeps and waits).
-- With what each step was called as (position, call: the determinism check).
-- Always one row at least: with no step, a single row of NULLs but db_now.
SELECT now() AS db_now, s.name, s.state, s.output, s.error, s.created_at, s.position, s.call
FROM (SELECT 1) AS one
LEFT JOIN pgqueue.steps s ON s.run_id = %(run_id)s
