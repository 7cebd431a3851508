-- Running runs among %(ids)s whose lease has expired: their worker died or was cut off
-- and stopped renewing it. How long ago, and whether a live worker serving the queue is
-- there to rescue them (each one's rescuer runs every few seconds:
-- sql/rescue_expired.sql); by primary key, and the workers' table.
SELECT r.id, r.queue,
       extract(epoch FROM now() - r.lease_expires_at)::double precision AS expired_seconds,
       EXISTS (SELECT 1 FROM pgqueue.workers w
                WHERE r.queue = ANY (w.queues)
                  AND w.heartbeat_at > now() - interval '60 seconds') AS rescuer
FROM pgqueue.runs r
WHERE r.id = ANY (%(ids)s::bigint[]) AND r.state = 'running' AND r.lease_expires_at < now()
