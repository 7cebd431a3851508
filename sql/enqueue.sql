-- Insert a batch of runs in one statement (a batch of one for a single enqueue).
-- Runs due now are `queued` and wake idle workers with one NOTIFY per queue (Postgres
-- folds repeats within a transaction and delivers them at commit); later ones are
-- `scheduled`. A run whose idempotency key is taken is skipped: the caller looks it up.
WITH input AS (
    SELECT *
    FROM unnest(
        %(task)s::text[], %(queue)s::text[], %(priority)s::smallint[],
        %(args)s::text[]::jsonb[], %(kwargs)s::text[]::jsonb[], %(max_attempts)s::integer[],
        %(timeout_seconds)s::double precision[], %(group_key)s::text[],
        %(idempotency_key)s::text[], %(run_at)s::timestamptz[], %(delay)s::double precision[],
        %(parent_id)s::bigint[]
    ) WITH ORDINALITY AS i (task, queue, priority, args, kwargs, max_attempts, timeout_seconds,
                           group_key, idempotency_key, run_at, delay, parent_id, n)
),
timed AS (
    SELECT i.*, coalesce(i.run_at, now() + coalesce(i.delay, 0) * interval '1 second') AS due
    FROM input i
),
inserted AS (
    INSERT INTO pgqueue.runs (task, queue, state, priority, args, kwargs, max_attempts,
                              timeout_seconds, group_key, idempotency_key, run_at, parent_id,
                              limited)
    SELECT task, queue, CASE WHEN due > now() THEN 'scheduled' ELSE 'queued' END,
           priority, args, kwargs, max_attempts, timeout_seconds, coalesce(group_key, ''),
           idempotency_key,
           due, parent_id,
           -- flagged if its queue has limits (see enqueue_runs.sql)
           queue IN (SELECT q.name FROM pgqueue.queues q
                      WHERE q.concurrency IS NOT NULL OR q.group_concurrency IS NOT NULL)
    FROM timed
    ORDER BY n
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue, state, idempotency_key
)
SELECT id, idempotency_key,
       (SELECT count(pg_notify('pgqueue_queued', q.queue))
          FROM (SELECT DISTINCT queue FROM inserted
                 WHERE state = 'queued' AND %(notify)s::boolean) q) AS notified
FROM inserted
ORDER BY id
