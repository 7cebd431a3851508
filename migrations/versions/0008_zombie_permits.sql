-- pgqueue 0008: a timed-out or canceled attempt keeps its permit while its code runs.
--
-- A sync task's thread cannot be stopped. When its timeout fires, the worker writes the
-- attempt's outcome (the run is retried or fails) while the thread runs on; the run then
-- no longer counts as `running`, and a limited queue would start another body at once,
-- over its limit. The worker files such an attempt here first, and deletes the row when
-- the thread returns. claim_limited() counts these rows as held permits while their
-- worker's heartbeat is fresh (it beats with every lease renewal): a worker that dies
-- stops holding them within one lease, as it stops holding its leases. Rows go with
-- their worker's row (deregistered or pruned).

CREATE TABLE pgqueue.zombie_permits (
    lease_token   uuid PRIMARY KEY,  -- the attempt's (a run's id repeats across attempts)
    run_id        bigint NOT NULL,
    worker_id     uuid NOT NULL REFERENCES pgqueue.workers (id) ON DELETE CASCADE,
    queue         text NOT NULL,
    group_key     text NOT NULL,
    lease_seconds double precision NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX zombie_permits_queue_idx ON pgqueue.zombie_permits (queue);
CREATE INDEX zombie_permits_worker_idx ON pgqueue.zombie_permits (worker_id);

-- claim_limited() counts these rows: the revision loads sql/functions/claim_limited.sql
-- after this file.
