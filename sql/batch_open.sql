-- Open a batch (app.batch()): its callback and the callback's kwargs; `total` stays NULL
-- until batch_seal.sql counts the members.
INSERT INTO pgqueue.batch_heads (on_complete, queue, priority, max_attempts, kwargs)
VALUES (%(on_complete)s::text, %(queue)s::text, %(priority)s::integer,
        %(max_attempts)s::integer, %(kwargs)s::jsonb)
RETURNING id
