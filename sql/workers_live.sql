-- The pgqueue.workers_live view: workers with a recent heartbeat.
SELECT * FROM pgqueue.workers_live ORDER BY host, pid
