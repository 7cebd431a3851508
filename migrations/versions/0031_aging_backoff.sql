-- Backoffs (docs/flow_control.md, Backoff of a group or a queue): raise
-- pgqueue.RetryAfter(seconds, scope="group" | "queue").
-- queues.backoff_until: no run of the queue starts before it (the claims test it where
-- they test `paused`). queues.group_backoff_until: the latest end of the queue's group
-- backoffs, so that "does any group backoff hold in this queue" is a test of the queue's
-- row (sql/parts/queue_has_limits.sql: such a queue is claimed by claim_limited(),
-- which skips the groups backed off). pgqueue.group_backoffs: one row per group backed
-- off, read by primary key by claim_limited() while the queue's group_backoff_until is
-- in the future; `pgqueue queues resume` deletes them.
ALTER TABLE pgqueue.queues
    ADD COLUMN IF NOT EXISTS backoff_until timestamptz,
    ADD COLUMN IF NOT EXISTS group_backoff_until timestamptz;

CREATE TABLE IF NOT EXISTS pgqueue.group_backoffs (
    queue     text NOT NULL,
    group_key text NOT NULL,
    until     timestamptz NOT NULL,
    PRIMARY KEY (queue, group_key)
);

-- Priority aging (docs/flow_control.md, Priority aging): app.queue(...,
-- priority_aging=s). queues.priority_aging: seconds per step, NULL for none.
-- runs.base_priority is added before, in a transaction of its own (0031_aging_backoff.py).
ALTER TABLE pgqueue.queues
    ADD COLUMN IF NOT EXISTS priority_aging double precision,
    DROP CONSTRAINT IF EXISTS queues_priority_aging_check,
    ADD CONSTRAINT queues_priority_aging_check CHECK (priority_aging > 0);
