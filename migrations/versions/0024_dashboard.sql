-- pgqueue 0024: the dashboard at a million runs (docs/dashboard.md).

-- Finished runs per queue and state since the install, added to by the workers' tally
-- (sql/tally_finished.sql) for every run it folds: the dashboard's "succeeded" and
-- "failed" totals are this plus the runs finished after pgqueue.tally_mark, never a count
-- of the history. A retried run counts again when it finishes again; pruning and
-- deleting runs take nothing away.
CREATE TABLE pgqueue.finished_totals (
    queue text NOT NULL,
    state text NOT NULL,
    n     bigint NOT NULL,
    PRIMARY KEY (queue, state)
);
-- What the tally has folded so far (the rest is read live, after the mark).
INSERT INTO pgqueue.finished_totals (queue, state, n)
SELECT queue, state, count(*)
FROM pgqueue.runs
WHERE state IN ('succeeded', 'failed', 'canceled')
  AND finished_at < (SELECT upto FROM pgqueue.tally_mark LIMIT 1)
GROUP BY queue, state;

-- Who did what from the dashboard: one row per action (a bulk action is one row with
-- its filter and how many runs it changed).
CREATE TABLE pgqueue.audit (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text NOT NULL,   -- the Django user, "token", "anonymous" (no token) or "cli"
    action text NOT NULL,   -- cancel, retry, delete, run_now, bulk_cancel, pause, ...
    run_id bigint,          -- the run acted on (one run's actions)
    target jsonb NOT NULL DEFAULT '{}',  -- a bulk action's filter, a queue, a schedule
    count  bigint NOT NULL DEFAULT 0,    -- how many runs (or objects) it changed
    reason text
);
CREATE INDEX audit_run_idx ON pgqueue.audit (run_id, id) WHERE run_id IS NOT NULL;

-- The two partial indexes of finished runs are built CONCURRENTLY by 0024_dashboard.py.

-- Estimates of a filter's count: state, queue and task are far from independent.
CREATE STATISTICS pgqueue.runs_state_queue_task (mcv) ON state, queue, task FROM pgqueue.runs;
