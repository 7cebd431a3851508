-- Insert one run due now, with none of the rarer options (pgqueue.enqueue.encoding.plain:
-- no idempotency key, group, run_at, delay, parent or unique key), no trace headers or
-- batch. Nearly every enqueue() is this. The run's encoding (`run`, one array, read by
-- parts/enqueue_run_fields.sql) gives the fields every run has; the columns' defaults
-- give the rest (state `queued`, run_at now(), group ''), with no ON CONFLICT: about 5 us
-- less a call than enqueue_run.sql, and the statement is then within a few percent of a
-- bare INSERT + NOTIFY (bench/RESULTS.md, "Single enqueue"). A row (id, NULL, _); the
-- NOTIFY of its queue is delivered at commit.
WITH inserted AS (
    INSERT INTO pgqueue.runs (task, queue, priority, args, kwargs, max_attempts,
                              timeout_seconds, limited)
    SELECT task, queue, priority, args, kwargs, max_attempts, timeout_seconds,
           -- flagged if its queue is claimed by claim_limited()
           EXISTS (SELECT 1 FROM pgqueue.queues q
                    WHERE q.name = r.queue
                      AND ({{queue_flags_runs}}))
    FROM (SELECT {{enqueue_run_fields}} FROM (SELECT %(run)s::jsonb AS e) i) r
    RETURNING id, queue
)
SELECT id, NULL::text,
       CASE WHEN %(notify)s::boolean THEN pg_notify('pgqueue_queued', queue) END
FROM inserted
