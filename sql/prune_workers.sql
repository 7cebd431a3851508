-- Forget workers that stopped beating (killed without a clean stop).
DELETE FROM pgqueue.workers
WHERE heartbeat_at < now() - %(stale_seconds)s * interval '1 second'
RETURNING id
