-- Store a queue's limits as declared in code (app.queue(...)); pause state is kept.
INSERT INTO pgqueue.queues (name, concurrency, group_concurrency, rate_limit, rate_period,
                            group_rate_limit, group_rate_period, ordered, group_weights,
                            default_group_weight)
VALUES (%(queue)s, %(concurrency)s, %(group_concurrency)s, %(rate_limit)s, %(rate_period)s,
        %(group_rate_limit)s, %(group_rate_period)s, %(ordered)s, %(group_weights)s,
        %(default_group_weight)s)
ON CONFLICT (name) DO UPDATE
   SET concurrency = EXCLUDED.concurrency,
       group_concurrency = EXCLUDED.group_concurrency,
       rate_limit = EXCLUDED.rate_limit,
       rate_period = EXCLUDED.rate_period,
       group_rate_limit = EXCLUDED.group_rate_limit,
       group_rate_period = EXCLUDED.group_rate_period,
       ordered = EXCLUDED.ordered,
       group_weights = EXCLUDED.group_weights,
       default_group_weight = EXCLUDED.default_group_weight,
       updated_at = now()
 WHERE (pgqueue.queues.concurrency, pgqueue.queues.group_concurrency,
        pgqueue.queues.rate_limit, pgqueue.queues.rate_period,
        pgqueue.queues.group_rate_limit, pgqueue.queues.group_rate_period,
        pgqueue.queues.ordered, pgqueue.queues.group_weights,
        pgqueue.queues.default_group_weight)
       IS DISTINCT FROM (EXCLUDED.concurrency, EXCLUDED.group_concurrency,
                         EXCLUDED.rate_limit, EXCLUDED.rate_period,
                         EXCLUDED.group_rate_limit, EXCLUDED.group_rate_period,
                         EXCLUDED.ordered, EXCLUDED.group_weights,
                         EXCLUDED.default_group_weight)
