-- A queue's priority aging, in seconds per priority step (NULL: none), as app.queue(...,
-- priority_aging=) declares it when a worker starts, or `pgqueue queues set Q
-- --priority-aging S`. Turned off, the queue's waiting runs get their base priority
-- back (the priority they were enqueued with).
WITH changed AS (
    INSERT INTO pgqueue.queues (name, priority_aging) VALUES (%(queue)s, %(aging)s)
    ON CONFLICT (name) DO UPDATE
       SET priority_aging = EXCLUDED.priority_aging, updated_at = now()
     WHERE pgqueue.queues.priority_aging IS DISTINCT FROM EXCLUDED.priority_aging
    RETURNING name
),
restored AS (
    UPDATE pgqueue.runs r SET priority = r.base_priority, base_priority = NULL
     WHERE %(aging)s::double precision IS NULL AND EXISTS (SELECT 1 FROM changed)
       AND r.queue = %(queue)s AND r.state IN ('scheduled', 'queued')
       AND r.base_priority IS NOT NULL
)
SELECT count(*) FROM changed
