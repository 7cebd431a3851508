-- pgqueue 0004: cluster-wide concurrency limits and fair groups.

-- Every run belongs to a group ('' by default), and the limited claim's index
-- runs_group_claim_idx: 0004_semaphores.py, before this file.

-- When each group of a limited queue was last served: the round-robin order.
CREATE TABLE pgqueue.queue_groups (
    queue           text NOT NULL,
    group_key       text NOT NULL,
    last_claimed_at timestamptz NOT NULL,
    PRIMARY KEY (queue, group_key)
);

-- Each group with live work: running (valid leases only) and waiting counts.
CREATE VIEW pgqueue.groups AS
SELECT r.queue,
       r.group_key,
       count(*) FILTER (WHERE r.state = 'running' AND r.lease_expires_at > now()) AS running,
       count(*) FILTER (WHERE r.state = 'queued') AS queued,
       count(*) FILTER (WHERE r.state IN ('scheduled', 'waiting')) AS deferred,
       max(g.last_claimed_at) AS last_claimed_at
FROM pgqueue.runs r
LEFT JOIN pgqueue.queue_groups g ON g.queue = r.queue AND g.group_key = r.group_key
WHERE r.state IN ('scheduled', 'queued', 'running', 'waiting')
GROUP BY r.queue, r.group_key;

-- pgqueue.enqueue: a NULL group means the default group ''.
CREATE OR REPLACE FUNCTION pgqueue.enqueue(
    task            text,
    args            jsonb DEFAULT '[]',
    kwargs          jsonb DEFAULT '{}',
    queue           text DEFAULT 'default',
    priority        integer DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer DEFAULT 3,
    idempotency_key text DEFAULT NULL,
    group_key       text DEFAULT NULL,
    timeout_seconds double precision DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    new_state text := CASE WHEN run_at IS NOT NULL AND run_at > now()
                           THEN 'scheduled' ELSE 'queued' END;
BEGIN
    INSERT INTO pgqueue.runs AS r (task, queue, state, priority, args, kwargs, max_attempts,
                                   timeout_seconds, group_key, idempotency_key, run_at)
    VALUES (enqueue.task, enqueue.queue, new_state, enqueue.priority, enqueue.args,
            enqueue.kwargs, enqueue.max_attempts, enqueue.timeout_seconds,
            coalesce(enqueue.group_key, ''), enqueue.idempotency_key,
            coalesce(enqueue.run_at, now()))
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING r.id INTO new_id;
    IF new_id IS NULL THEN
        SELECT r.id INTO new_id FROM pgqueue.runs r
        WHERE r.idempotency_key = enqueue.idempotency_key;
        RETURN new_id;
    END IF;
    IF new_state = 'queued' THEN
        PERFORM pg_notify('pgqueue_queued', enqueue.queue);
    END IF;
    RETURN new_id;
END
$$;
