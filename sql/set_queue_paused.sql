-- Pause or resume a queue. A resume lifts its backoffs too (RetryAfter(scope="queue" |
-- "group"): backoff_until, and every group backoff of the queue), and wakes the workers
-- that serve it (pgqueue_queued) besides telling them to read its limits again.
WITH lifted AS (
    DELETE FROM pgqueue.group_backoffs WHERE queue = %(queue)s AND NOT %(paused)s
),
changed AS (
    INSERT INTO pgqueue.queues (name, paused) VALUES (%(queue)s, %(paused)s)
    ON CONFLICT (name) DO UPDATE
       SET paused = EXCLUDED.paused, updated_at = now(),
           backoff_until = CASE WHEN EXCLUDED.paused THEN pgqueue.queues.backoff_until END,
           group_backoff_until = CASE WHEN EXCLUDED.paused
                                      THEN pgqueue.queues.group_backoff_until END
    RETURNING name
)
SELECT pg_notify('pgqueue_config', name),
       CASE WHEN NOT %(paused)s THEN pg_notify('pgqueue_queued', name) END
FROM changed
