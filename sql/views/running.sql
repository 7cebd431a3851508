-- Runs a worker holds now, with the worker, how long its lease has left and the run's
-- latest progress report (ctx.progress; a column added last, as CREATE OR REPLACE VIEW
-- requires).
CREATE OR REPLACE VIEW pgqueue.running AS
SELECT r.id, r.task, r.queue, r.group_key, r.attempt, r.max_attempts, r.args, r.kwargs,
       r.started_at,
       extract(epoch FROM now() - r.started_at)::double precision AS running_seconds,
       r.lease_expires_at,
       extract(epoch FROM r.lease_expires_at - now())::double precision AS lease_left_seconds,
       r.worker_id, w.host, w.pid, r.progress
FROM pgqueue.runs r
LEFT JOIN pgqueue.workers w ON w.id = r.worker_id
WHERE r.state = 'running';
