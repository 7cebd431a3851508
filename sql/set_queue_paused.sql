WITH changed AS (
    INSERT INTO pgqueue.queues (name, paused) VALUES (%(queue)s, %(paused)s)
    ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()
    RETURNING name
)
SELECT pg_notify('pgqueue_config', name) FROM changed
