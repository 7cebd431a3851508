-- A queue's priority aging, in seconds per priority step (NULL: none), set at run time:
-- `pgqueue queues set Q --priority-aging S`, app.set_priority_aging(Q, S). (A worker's
-- start stores what app.queue(..., priority_aging=) declares with the queue's limits, in
-- configure_queue.sql.) Turned off, the queue's waiting runs get their base priority
-- back (the priority they were enqueued with).
WITH changed AS (
    INSERT INTO pgqueue.queues (name, priority_aging) VALUES (%(queue)s, %(aging)s)
    ON CONFLICT (name) DO UPDATE
       SET priority_aging = EXCLUDED.priority_aging, updated_at = now()
     WHERE pgqueue.queues.priority_aging IS DISTINCT FROM EXCLUDED.priority_aging
    RETURNING name
),
restored AS (
{{restore_base_priority}}
       AND %(aging)s::double precision IS NULL AND EXISTS (SELECT 1 FROM changed)
)
SELECT count(*) FROM changed
