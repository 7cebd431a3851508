-- Insert several runs sent as one JSON document (enqueue_many; App.insert_runs of more
-- than one row). Parameter `runs` holds one array per run:
--     [args, kwargs, group_key, idempotency_key, task, queue, priority, max_attempts,
--      timeout_seconds, run_at, delay, parent_id]
-- An array may stop early: a missing or null value is the batch's, from the parameter of
-- the same name. enqueue_many sends [args, kwargs] per run (and group_key when the task's
-- group is a function of its arguments) and the values its runs share once.
-- Runs due now are `queued` and wake idle workers with one NOTIFY per queue (Postgres
-- folds repeats within a transaction and delivers them at commit); later ones are
-- `scheduled`. Ids follow the document's order (the caller maps them back by it).
-- No ON CONFLICT here: a batch with idempotency keys goes to enqueue_runs_keyed.sql, this
-- statement plus that clause (which makes every row a speculative insertion).
WITH input AS (
    SELECT e -> 0 AS args,
           e -> 1 AS kwargs,
           coalesce(e ->> 2, %(group_key)s::text, '') AS group_key,
           e ->> 3 AS idempotency_key,
           coalesce(e ->> 4, %(task)s::text) AS task,
           coalesce(e ->> 5, %(queue)s::text) AS queue,
           coalesce((e ->> 6)::smallint, %(priority)s::smallint) AS priority,
           coalesce((e ->> 7)::integer, %(max_attempts)s::integer) AS max_attempts,
           coalesce((e ->> 8)::double precision, %(timeout_seconds)s::double precision)
               AS timeout_seconds,
           coalesce((e ->> 9)::timestamptz, %(run_at)s::timestamptz,
                    now() + coalesce((e ->> 10)::double precision,
                                     %(delay)s::double precision, 0) * interval '1 second')
               AS due,
           coalesce((e ->> 11)::bigint, %(parent_id)s::bigint) AS parent_id,
           n
    FROM jsonb_array_elements(%(runs)s::jsonb) WITH ORDINALITY AS i (e, n)
),
-- Queues with limits: their runs are flagged `limited` (runs_group_claim_idx holds only
-- those; the trigger of migration 0006 re-flags a queue's runs when its limits change).
limits AS (
    SELECT q.name FROM pgqueue.queues q
    WHERE q.concurrency IS NOT NULL OR q.group_concurrency IS NOT NULL
),
inserted AS (
    INSERT INTO pgqueue.runs (task, queue, state, priority, args, kwargs, max_attempts,
                              timeout_seconds, group_key, idempotency_key, run_at, parent_id,
                              limited)
    SELECT task, queue, CASE WHEN due > now() THEN 'scheduled' ELSE 'queued' END,
           priority, args, kwargs, max_attempts, timeout_seconds, group_key, idempotency_key,
           due, parent_id, queue IN (SELECT name FROM limits)
    FROM input
    ORDER BY n
    RETURNING id, queue, state, idempotency_key
)
-- One row: the ids and keys as two arrays in id order (a row per run cost the client
-- more than building the document).
SELECT array_agg(id ORDER BY id) AS ids,
       array_agg(idempotency_key ORDER BY id) AS keys,
       (SELECT count(pg_notify('pgqueue_queued', q.queue))
          FROM (SELECT DISTINCT queue FROM inserted
                 WHERE state = 'queued' AND %(notify)s::boolean) q) AS notified
FROM inserted
