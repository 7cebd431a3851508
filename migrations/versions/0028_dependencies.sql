-- Dependencies between runs (issue 45, docs/flow_control.md, Dependencies): the triggers
-- that hold a run back until the runs it names in `after` are finished, and release or
-- cancel it in the transaction that finishes the last of them. The columns and their
-- CHECK come first (0028_dependencies.py), the trigger functions after this file.

-- pgqueue.enqueue() takes `after` and `on_dependency_failure`: a new signature (its
-- file, sql/functions/enqueue.sql, replaces this one; a call that names neither is
-- read as before).
DROP FUNCTION IF EXISTS pgqueue.enqueue(text, jsonb, jsonb, text, integer, timestamptz,
                                        integer, text, text, double precision);

-- A run enqueued with `after`: its dependencies checked, locked and flagged, and the
-- run `waiting` while one of them is unfinished (pgqueue.runs_enqueue_after()). Only
-- such runs: every other insert tests one column for NULL.
CREATE TRIGGER runs_enqueue_after
    BEFORE INSERT ON pgqueue.runs
    FOR EACH ROW
    WHEN (NEW.after IS NOT NULL)
    EXECUTE FUNCTION pgqueue.runs_enqueue_after();

-- A run whose dependency had failed or been canceled before its enqueue, under the
-- policy 'cancel': canceled once inserted (pgqueue.runs_after_canceled()).
CREATE TRIGGER runs_after_canceled
    AFTER INSERT ON pgqueue.runs
    FOR EACH ROW
    WHEN (NEW.after IS NOT NULL AND NEW.state = 'waiting' AND NEW.cancel_reason IS NOT NULL)
    EXECUTE FUNCTION pgqueue.runs_after_canceled();

-- A run with dependents that finishes, however it finishes: they are released or
-- canceled in its transaction (pgqueue.runs_dependency_done()). The condition is read
-- for each updated row without a call: a claim, a renewal or the completion of a run
-- without dependents costs nothing more.
CREATE TRIGGER runs_dependency_done
    AFTER UPDATE OF state ON pgqueue.runs
    FOR EACH ROW
    WHEN (NEW.has_dependents
          AND NEW.state IN ('succeeded', 'failed', 'canceled')
          AND OLD.state NOT IN ('succeeded', 'failed', 'canceled'))
    EXECUTE FUNCTION pgqueue.runs_dependency_done();

-- One deleted before it finished (by hand: pgqueue deletes finished runs only) is a
-- dependency that did not succeed.
CREATE TRIGGER runs_dependency_deleted
    AFTER DELETE ON pgqueue.runs
    FOR EACH ROW
    WHEN (OLD.has_dependents AND OLD.state NOT IN ('succeeded', 'failed', 'canceled'))
    EXECUTE FUNCTION pgqueue.runs_dependency_done();
