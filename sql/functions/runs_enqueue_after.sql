-- Trigger function of runs_enqueue_after (BEFORE INSERT on runs, for a run enqueued with
-- dependencies: `after` set; docs/flow_control.md, Dependencies). Every path that inserts
-- runs (the Python statements, pgqueue.enqueue(), pgqueue.enqueue_unique(), an INSERT by
-- hand) writes only the columns `after` and `on_dependency_failure`; this does the rest:
--
-- - The dependencies are locked (FOR NO KEY UPDATE, in id order) until this transaction
--   ends, and read as they are now. A dependency being finished meanwhile by another
--   transaction is either seen finished (that transaction committed first), or finishes
--   after this one commits, and then its trigger (runs_dependency_done) sees this run.
--   A dependency that does not exist (never, or pruned) is an error (SQLSTATE 23503,
--   constraint name runs_after_exists), which the Python API raises as RunNotFound.
-- - Each unfinished dependency is flagged `has_dependents`, the condition of the trigger
--   that releases this run when it finishes.
-- - With a dependency unfinished, the run is `waiting` (never claimed, never staged: its
--   run_at is 9999-12-31, no event, no child), its due time kept in `after_due`.
--   With every dependency finished already, the run is as its enqueue made it (queued or
--   scheduled by its due time); but when one of them failed or was canceled and the
--   policy is 'cancel', the run is canceled once inserted (runs_after_canceled, through
--   pgqueue.cancel(), with a reason naming that dependency).
-- `after` is stored sorted, each id once; an empty list is no dependency.
CREATE OR REPLACE FUNCTION pgqueue.runs_enqueue_after() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    wanted bigint[] := ARRAY(SELECT DISTINCT x FROM unnest(NEW.after) AS x
                              WHERE x IS NOT NULL ORDER BY x);
    seen bigint[] := '{}';
    d record;
    pending integer := 0;
    bad bigint;
    bad_state text;
    missing bigint;
BEGIN
    IF cardinality(wanted) = 0 THEN
        NEW.after := NULL;
        NEW.on_dependency_failure := NULL;
        RETURN NEW;
    END IF;
    NEW.after := wanted;
    NEW.on_dependency_failure := coalesce(NEW.on_dependency_failure, 'cancel');
    FOR d IN
        SELECT r.id, r.state, r.has_dependents
          FROM pgqueue.runs r
         WHERE r.id = ANY(wanted)
         ORDER BY r.id
           FOR NO KEY UPDATE
    LOOP
        seen := seen || d.id;
        IF d.state NOT IN ('succeeded', 'failed', 'canceled') THEN
            pending := pending + 1;
            IF NOT d.has_dependents THEN
                UPDATE pgqueue.runs SET has_dependents = true WHERE id = d.id;
            END IF;
        ELSIF d.state <> 'succeeded' AND bad IS NULL THEN
            bad := d.id;
            bad_state := d.state;
        END IF;
    END LOOP;
    IF cardinality(seen) < cardinality(wanted) THEN
        SELECT min(x) INTO missing FROM unnest(wanted) AS x WHERE x <> ALL(seen);
        RAISE EXCEPTION 'pgqueue: run % named in after= does not exist (a dependency must be a run enqueued before, and not pruned)', missing
              USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'runs_after_exists';
    END IF;
    IF bad IS NOT NULL AND NEW.on_dependency_failure = 'cancel' THEN
        NEW.cancel_reason := format('dependency #%s %s', bad,
                                    CASE bad_state WHEN 'failed' THEN 'failed'
                                                   ELSE 'was canceled' END);
    ELSIF pending = 0 THEN
        RETURN NEW;
    END IF;
    NEW.after_due := NEW.run_at;
    NEW.run_at := timestamptz '9999-12-31 00:00:00+00';
    NEW.state := 'waiting';
    RETURN NEW;
END
$$;
