-- Store a queue's limits and priority aging as declared in code (app.queue(...)), when a
-- worker starts; pause state is kept. Declared without aging (NULL), the queue has none,
-- even if `pgqueue queues set Q --priority-aging S` set one, and when that turns aging
-- off its waiting runs get their base priority back (as in set_priority_aging.sql).
-- `before` reads the row as the statement's snapshot has it (the upsert's change is not
-- visible to it).
WITH before AS (
    SELECT priority_aging FROM pgqueue.queues WHERE name = %(queue)s
),
changed AS (
    INSERT INTO pgqueue.queues (name, concurrency, group_concurrency, rate_limit,
                                rate_period, group_rate_limit, group_rate_period, ordered,
                                group_weights, default_group_weight, priority_aging)
    VALUES (%(queue)s, %(concurrency)s, %(group_concurrency)s, %(rate_limit)s,
            %(rate_period)s, %(group_rate_limit)s, %(group_rate_period)s, %(ordered)s,
            %(group_weights)s, %(default_group_weight)s, %(priority_aging)s)
    ON CONFLICT (name) DO UPDATE
       SET {{queue_limits_from_excluded}},
           group_weights = EXCLUDED.group_weights,
           default_group_weight = EXCLUDED.default_group_weight,
           priority_aging = EXCLUDED.priority_aging,
           updated_at = now()
     WHERE (pgqueue.queues.concurrency, pgqueue.queues.group_concurrency,
            pgqueue.queues.rate_limit, pgqueue.queues.rate_period,
            pgqueue.queues.group_rate_limit, pgqueue.queues.group_rate_period,
            pgqueue.queues.ordered, pgqueue.queues.group_weights,
            pgqueue.queues.default_group_weight, pgqueue.queues.priority_aging)
           IS DISTINCT FROM (EXCLUDED.concurrency, EXCLUDED.group_concurrency,
                             EXCLUDED.rate_limit, EXCLUDED.rate_period,
                             EXCLUDED.group_rate_limit, EXCLUDED.group_rate_period,
                             EXCLUDED.ordered, EXCLUDED.group_weights,
                             EXCLUDED.default_group_weight, EXCLUDED.priority_aging)
    RETURNING name
),
restored AS (
{{restore_base_priority}}
       AND %(priority_aging)s::double precision IS NULL AND EXISTS (SELECT 1 FROM changed)
       AND EXISTS (SELECT 1 FROM before WHERE priority_aging IS NOT NULL)
)
SELECT count(*) FROM changed
