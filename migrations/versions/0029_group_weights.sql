-- Weighted fairness between the groups of a queue (docs/flow_control.md, Group weights).
-- `group_weights`: group -> weight (1 to 1000); NULL: the queue's groups take plain turns
-- (claim_limited's round-robin, unchanged). `default_group_weight`: the weight of a group
-- the map does not name. `group_vtime`: the queue's virtual time, the pass of the latest
-- start a weighted claim handed out; a group that comes back from idle starts from it.
ALTER TABLE pgqueue.queues
    ADD COLUMN IF NOT EXISTS group_weights jsonb,
    ADD COLUMN IF NOT EXISTS default_group_weight integer NOT NULL DEFAULT 1,
    ADD COLUMN IF NOT EXISTS group_vtime double precision NOT NULL DEFAULT 0,
    DROP CONSTRAINT IF EXISTS queues_group_weights_check,
    ADD CONSTRAINT queues_group_weights_check
        CHECK (group_weights IS NULL OR jsonb_typeof(group_weights) = 'object'),
    DROP CONSTRAINT IF EXISTS queues_default_group_weight_check,
    ADD CONSTRAINT queues_default_group_weight_check
        CHECK (default_group_weight BETWEEN 1 AND 1000);

-- Each weighted group's pass (stride scheduling): the virtual time of its next start. A
-- start advances it by 1/weight; the claim takes the groups with the lowest pass first. A
-- row whose pass is at or below its queue's group_vtime says nothing (a pass is read as at
-- least group_vtime), so the claim deletes those now and then.
CREATE TABLE IF NOT EXISTS pgqueue.group_passes (
    queue     text NOT NULL,
    group_key text NOT NULL,
    pass      double precision NOT NULL,
    PRIMARY KEY (queue, group_key)
);
