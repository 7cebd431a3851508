-- Enqueue one run per due tick through pgqueue.enqueue, with an idempotency key per
-- (schedule, tick): a tick that was already enqueued returns its existing run.
SELECT t.name, t.tick,
       pgqueue.enqueue(task => s.task, args => s.args, kwargs => s.kwargs, queue => s.queue,
                       priority => s.priority, run_at => t.tick,
                       max_attempts => s.max_attempts, idempotency_key => t.idempotency_key,
                       group_key => s.group_key, timeout_seconds => s.timeout_seconds)
           AS run_id
FROM unnest(%(name)s::text[], %(tick)s::timestamptz[], %(idempotency_key)s::text[])
     WITH ORDINALITY AS t (name, tick, idempotency_key, n)
JOIN pgqueue.schedules s ON s.name = t.name
ORDER BY t.n
