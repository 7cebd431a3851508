-- Change a queue's limits at run time (`pgqueue queues set`); workers hear of it at once.
WITH changed AS (
    INSERT INTO pgqueue.queues (name, concurrency, group_concurrency, rate_limit,
                                rate_period, group_rate_limit, group_rate_period, ordered)
    VALUES (%(queue)s, %(concurrency)s, %(group_concurrency)s, %(rate_limit)s,
            %(rate_period)s, %(group_rate_limit)s, %(group_rate_period)s, %(ordered)s)
    ON CONFLICT (name) DO UPDATE
       SET {{queue_limits_from_excluded}},
           updated_at = now()
    RETURNING name
)
SELECT pg_notify('pgqueue_config', name) FROM changed
