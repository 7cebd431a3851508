-- Insert one run due now, with none of the rarer options: no idempotency key, group, run_at,
-- delay, parent, trace headers or batch. Nearly every enqueue() is this. enqueue_run.sql's
-- row with 8 parameters instead of 15, the columns' defaults for the rest (state `queued`,
-- run_at now(), group ''), and no ON CONFLICT: about 5 us less a call, and the statement
-- is then within a few percent of a bare INSERT + NOTIFY (bench/RESULTS.md, "Single
-- enqueue"). A row (id, NULL, _); the NOTIFY of its queue is delivered at commit.
WITH inserted AS (
    INSERT INTO pgqueue.runs (task, queue, priority, args, kwargs, max_attempts,
                              timeout_seconds, limited)
    VALUES (%(task)s::text, %(queue)s::text, %(priority)s::smallint, %(args)s::jsonb,
            %(kwargs)s::jsonb, %(max_attempts)s::integer, %(timeout_seconds)s::double precision,
            -- flagged if its queue is claimed by claim_limited()
            EXISTS (SELECT 1 FROM pgqueue.queues q
                     WHERE q.name = %(queue)s::text
                       AND ({{queue_flags_runs}})))
    RETURNING id, queue
)
SELECT id, NULL::text,
       CASE WHEN %(notify)s::boolean THEN pg_notify('pgqueue_queued', queue) END
FROM inserted
