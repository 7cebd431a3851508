SELECT w.id, w.host, w.pid, w.queues, w.concurrency, w.version, w.started_at, w.heartbeat_at,
       extract(epoch FROM now() - w.heartbeat_at)::double precision AS heartbeat_age,
       (SELECT count(*) FROM pgqueue.runs r
         WHERE r.state = 'running' AND r.worker_id = w.id AND r.queue = ANY(w.queues)) AS running
FROM pgqueue.workers w
ORDER BY w.started_at
