-- Every recorded step of a run, with the database clock (for durable sleeps and waits).
SELECT name, state, output, error, created_at, now() AS db_now
FROM pgqueue.steps
WHERE run_id = %(run_id)s
