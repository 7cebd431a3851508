-- Enqueue one run of a schedule now, outside its cron (no idempotency key).
SELECT pgqueue.enqueue(task => s.task, args => s.args, kwargs => s.kwargs, queue => s.queue,
                       priority => s.priority, max_attempts => s.max_attempts,
                       group_key => s.group_key, timeout_seconds => s.timeout_seconds)
FROM pgqueue.schedules s
WHERE s.name = %(name)s
