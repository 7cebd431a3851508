-- Store a queue's limits as declared in code (app.queue(...)); pause state is kept.
INSERT INTO pgqueue.queues (name, concurrency, group_concurrency)
VALUES (%(queue)s, %(concurrency)s, %(group_concurrency)s)
ON CONFLICT (name) DO UPDATE
   SET concurrency = EXCLUDED.concurrency,
       group_concurrency = EXCLUDED.group_concurrency,
       updated_at = now()
 WHERE (pgqueue.queues.concurrency, pgqueue.queues.group_concurrency)
       IS DISTINCT FROM (EXCLUDED.concurrency, EXCLUDED.group_concurrency)
