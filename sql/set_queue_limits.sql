-- Change a queue's limits at run time (`pgqueue queues set`); workers hear of it at once.
WITH changed AS (
    INSERT INTO pgqueue.queues (name, concurrency, group_concurrency)
    VALUES (%(queue)s, %(concurrency)s, %(group_concurrency)s)
    ON CONFLICT (name) DO UPDATE
       SET concurrency = EXCLUDED.concurrency,
           group_concurrency = EXCLUDED.group_concurrency,
           updated_at = now()
    RETURNING name
)
SELECT pg_notify('pgqueue_config', name) FROM changed
