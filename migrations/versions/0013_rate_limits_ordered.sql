-- Rate limits and ordered groups (docs/flow_control.md).
--
-- A queue's rate limit is `rate_limit` starts per `rate_period` seconds (1, 60 or 3600),
-- its groups' `group_rate_limit` per `group_rate_period`. The starts of the last period
-- are a log of (slot, count): a slot is a start time rounded up to a fiftieth of the
-- period, so that a log holds about fifty entries however many runs start, and a start
-- is never counted as earlier than it happened (the limit holds in every interval). The
-- queue's log lives on its row, which claim_limited() locks anyway; a group's in
-- pgqueue.group_rates. `rate_open_at`: when the next start is allowed, written by a
-- claim that the rate limit cut short (the worker sleeps until then).
ALTER TABLE pgqueue.queues
    ADD COLUMN rate_limit integer CHECK (rate_limit > 0),
    ADD COLUMN rate_period double precision CHECK (rate_period IN (1, 60, 3600)),
    ADD COLUMN group_rate_limit integer CHECK (group_rate_limit > 0),
    ADD COLUMN group_rate_period double precision CHECK (group_rate_period IN (1, 60, 3600)),
    ADD COLUMN ordered boolean NOT NULL DEFAULT false,
    ADD COLUMN rate_slots timestamptz[] NOT NULL DEFAULT '{}',
    ADD COLUMN rate_counts integer[] NOT NULL DEFAULT '{}',
    ADD COLUMN rate_open_at timestamptz,
    ADD CONSTRAINT queues_rate_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    ADD CONSTRAINT queues_group_rate_check
        CHECK ((group_rate_limit IS NULL) = (group_rate_period IS NULL));

CREATE TABLE pgqueue.group_rates (
    queue       text NOT NULL,
    group_key   text NOT NULL,
    rate_slots  timestamptz[] NOT NULL,
    rate_counts integer[] NOT NULL,
    PRIMARY KEY (queue, group_key)
);

-- Ordered groups: the earliest unfinished run of a group, by id. Only runs of queues with
-- limits (an ordered queue has them), so the runs of other queues never enter it.
CREATE INDEX runs_group_order_idx ON pgqueue.runs (queue, group_key, id)
    WHERE limited AND state IN ('scheduled', 'queued', 'running', 'waiting');

-- The trigger re-flags a queue's runs when any of its limits comes or goes.
DROP TRIGGER queues_limits_changed ON pgqueue.queues;
CREATE TRIGGER queues_limits_changed
    AFTER INSERT OR UPDATE OF concurrency, group_concurrency, rate_limit, group_rate_limit,
                              ordered
    ON pgqueue.queues
    FOR EACH ROW EXECUTE FUNCTION pgqueue.queue_limits_changed();
