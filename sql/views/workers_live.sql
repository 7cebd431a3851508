-- Workers whose heartbeat (renewed every lease/3 seconds) is under a minute old, with
-- the runs each holds now.
CREATE OR REPLACE VIEW pgqueue.workers_live AS
SELECT w.id, w.host, w.pid, w.queues, w.concurrency, w.version, w.started_at,
       w.heartbeat_at,
       extract(epoch FROM now() - w.heartbeat_at)::double precision AS heartbeat_age_seconds,
       (SELECT count(*) FROM pgqueue.runs r
         WHERE r.state = 'running' AND r.worker_id = w.id) AS running
FROM pgqueue.workers w
WHERE w.heartbeat_at > now() - interval '60 seconds';
