-- The runs of a batch statement (enqueue_runs.sql, enqueue_runs_keyed.sql), one row per
-- element of the JSON document `runs`, in its order (n), and the queues with limits.
-- Ends with a comma: the including statement's `inserted` CTE follows.
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
-- Queues claimed by claim_limited(): their runs are flagged `limited`
-- (runs_group_claim_idx holds only those; the trigger pgqueue.queue_limits_changed()
-- re-flags a queue's runs when its limits change).
limits AS (
    SELECT q.name FROM pgqueue.queues q
    WHERE {{queue_flags_runs}}
),
