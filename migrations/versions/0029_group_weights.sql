-- Weighted fairness between the groups of a queue (docs/flow_control.md, Group weights).
-- `group_weights`: group -> weight (1 to 1000); NULL: the queue's groups take plain turns
-- (claim_limited's round-robin, unchanged). `default_group_weight`: the weight of a group
-- the map does not name. `group_vtime`: the queue's virtual time, the pass of the latest
-- start a weighted claim handed out; a group that comes back from idle starts from it.
-- `group_passes`: group -> its pass (stride scheduling), the virtual time of its next
-- start; a start advances it by 1/weight, and the claim takes the lowest passes first. A
-- pass at or below group_vtime reads as group_vtime, so only the groups ahead of it are
-- kept. On the queue's row, which every claim locks and writes already: no other table.
ALTER TABLE pgqueue.queues
    ADD COLUMN IF NOT EXISTS group_weights jsonb,
    ADD COLUMN IF NOT EXISTS default_group_weight integer NOT NULL DEFAULT 1,
    ADD COLUMN IF NOT EXISTS group_vtime double precision NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS group_passes jsonb NOT NULL DEFAULT '{}',
    DROP CONSTRAINT IF EXISTS queues_group_weights_check,
    -- an object of whole numbers 1 to 1000 (pgqueue.tasks.registry.WEIGHT_MAX): the claim
    -- casts each weight to integer
    ADD CONSTRAINT queues_group_weights_check
        CHECK (group_weights IS NULL
               OR (jsonb_typeof(group_weights) = 'object'
                   AND NOT jsonb_path_exists(
                       group_weights,
                       '$.* ? (@.type() != "number" || @ < 1 || @ > 1000 || @.floor() != @)'))),
    DROP CONSTRAINT IF EXISTS queues_default_group_weight_check,
    ADD CONSTRAINT queues_default_group_weight_check
        CHECK (default_group_weight BETWEEN 1 AND 1000);

