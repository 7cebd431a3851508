-- pgqueue 0015: uniqueness scopes and batches (docs/flow_control.md).
--
-- unique_key / unique_while: at most one run per key while the run is in its scope:
--   queued   - waiting for its first start (scheduled or queued, never started);
--   active   - not terminal (scheduled, queued, running, waiting);
--   retained - until the run is pruned.
-- One partial unique index holds the runs in scope, so that concurrent enqueues cannot
-- insert two (pgqueue.enqueue_unique() inserts with ON CONFLICT DO NOTHING and looks the
-- holder up through the same index). A run leaves the index by itself when its state
-- leaves the scope; `unique_while` is set to NULL when a newer enqueue finds the holder
-- older than its `unique_for` window. Runs without a key are not in the index and pay
-- nothing for it.
-- The columns, their CHECKs and runs_unique_key_idx: 0015_uniqueness_batches.py, before
-- this file.

-- A batch: runs enqueued together (app.batch()), and the task enqueued once when the last
-- of them is terminal. `total` is set when the batch's transaction seals it; the counters
-- move as members enter (or, on an operator's retry, leave) a terminal state. One row per
-- batch, updated by every transaction that finishes members: a low fillfactor keeps
-- those updates HOT.
CREATE TABLE pgqueue.batches (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    on_complete     text NOT NULL,
    queue           text NOT NULL,
    priority        integer NOT NULL DEFAULT 0,
    max_attempts    integer NOT NULL DEFAULT 3,
    kwargs          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(kwargs) = 'object'),
    total           integer CHECK (total >= 0),
    succeeded       integer NOT NULL DEFAULT 0,
    failed          integer NOT NULL DEFAULT 0,
    canceled        integer NOT NULL DEFAULT 0,
    callback_run_id bigint,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sealed_at       timestamptz,
    completed_at    timestamptz
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000
);

-- A batch's members (sealing counts them; inspection lists them): runs_batch_idx, built
-- by 0015_uniqueness_batches.py before this file.

-- Members that enter or leave a terminal state call pgqueue.batch_note() (runs outside a
-- batch pay for the first test of the WHEN condition alone; members for the state tests
-- on their other changes), which notes the change in the transaction and answers true for
-- the transaction's first change: the trigger is queued once per transaction, and at
-- commit it adds the transaction's changes to the batches' counters.
CREATE CONSTRAINT TRIGGER runs_batch_flush
    AFTER UPDATE ON pgqueue.runs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.batch_id IS NOT NULL
          AND (OLD.state IN ('succeeded', 'failed', 'canceled'))
              IS DISTINCT FROM (NEW.state IN ('succeeded', 'failed', 'canceled'))
          AND pgqueue.batch_note(OLD.state, NEW.state, NEW.batch_id))
    EXECUTE FUNCTION pgqueue.batch_flush();
