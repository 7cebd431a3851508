-- Trigger function of runs_dependency_done (AFTER UPDATE OF state on runs, for a run with
-- dependents that reaches a terminal state: a completion, a failure, a cancel, one by
-- one or in bulk, a rescue on the last attempt, whichever code or release wrote it) and
-- of runs_dependency_deleted (AFTER DELETE of such a run before it finished). In the
-- transaction that finishes the dependency, each run waiting for it (runs_after_idx:
-- `waiting` runs whose `after` holds its id) is locked, in id order, and its
-- dependencies read again, as they are now:
--
-- - one failed, was canceled or deleted, and its policy is 'cancel' (the default): the
--   run is canceled (pgqueue.cancel()), the reason naming that dependency, and so are,
--   level by level, the runs waiting for it (a loop here, not a trigger per level: a
--   chain of any length costs no stack). A run canceled by the cascade names its
--   dependency and the run whose end started it: "dependency #12 was canceled
--   (dependency #11 failed)";
-- - none is unfinished any more: the run is released, `queued` (NOTIFY pgqueue_queued),
--   or `scheduled` when its own due time (after_due) is still ahead (NOTIFY pgqueue_due,
--   which its queue's stagers hear);
-- - else it waits on.
--
-- Two dependencies of one run finished by two transactions at once: each locks the run,
-- so the second reads the dependencies after the first committed, and sees both
-- finished. A dependency that is gone (pruned once finished) counts as finished. Reading
-- the dependencies again, rather than counting them down, makes a second end of one
-- dependency (an operator's retry) change nothing.
CREATE OR REPLACE FUNCTION pgqueue.runs_dependency_done() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    root bigint;
    root_end text;       -- how the run that fired this ended: NULL when it succeeded
    gone bigint;         -- a dependency deleted before it finished
    frontier bigint[];
    cascade bigint[] := '{}';
    next bigint[];
    d record;
    pending bigint;
    bad bigint;
    bad_state text;
    via bigint;
    reason text;
    released text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        root := OLD.id;
        root_end := 'was deleted';
        gone := OLD.id;
    ELSE
        root := NEW.id;
        root_end := CASE NEW.state WHEN 'succeeded' THEN NULL WHEN 'failed' THEN 'failed'
                                   ELSE 'was canceled' END;
    END IF;
    frontier := ARRAY[root];
    LOOP
        next := '{}';
        FOR d IN
            SELECT r.id, r.queue, r.after, r.on_dependency_failure, r.has_dependents
              FROM pgqueue.runs r
             WHERE r.state = 'waiting' AND r.after IS NOT NULL AND r.after && frontier
             ORDER BY r.id
               FOR NO KEY UPDATE
        LOOP
            -- its dependencies now (a statement of its own: a fresh snapshot, taken once
            -- the run is locked)
            SELECT count(*) FILTER (WHERE y.state NOT IN ('succeeded', 'failed', 'canceled')),
                   min(y.id) FILTER (WHERE y.state IN ('failed', 'canceled'))
              INTO pending, bad
              FROM pgqueue.runs y
             WHERE y.id = ANY(d.after);
            IF gone IS NOT NULL AND gone = ANY(d.after) THEN
                bad := least(bad, gone);
            END IF;
            IF bad IS NOT NULL AND d.on_dependency_failure IS DISTINCT FROM 'run' THEN
                -- the dependency to name: the run whose end started this, else one the
                -- cascade canceled, else the first that failed or was canceled before
                via := CASE WHEN root_end IS NOT NULL AND root = ANY(d.after) THEN root
                            ELSE (SELECT min(x) FROM unnest(d.after) AS x
                                   WHERE x = ANY(cascade)) END;
                IF via = root THEN
                    reason := format('dependency #%s %s', root, root_end);
                ELSIF via IS NOT NULL THEN
                    reason := format('dependency #%s was canceled (dependency #%s %s)',
                                     via, root, root_end);
                ELSE
                    SELECT y.state INTO bad_state FROM pgqueue.runs y WHERE y.id = bad;
                    reason := format('dependency #%s %s', bad,
                                     CASE WHEN bad = gone THEN 'was deleted'
                                          WHEN bad_state = 'failed' THEN 'failed'
                                          ELSE 'was canceled' END);
                END IF;
                IF d.has_dependents THEN
                    -- its own dependents are the next level of this loop: its cancel
                    -- must not fire this trigger again
                    UPDATE pgqueue.runs SET has_dependents = false WHERE id = d.id;
                    next := next || d.id;
                END IF;
                PERFORM pgqueue.cancel(d.id, false, reason);
                cascade := cascade || d.id;
            ELSIF pending = 0 THEN
                UPDATE pgqueue.runs r
                   SET state = CASE WHEN r.after_due > now() THEN 'scheduled' ELSE 'queued' END,
                       run_at = greatest(coalesce(r.after_due, now()), now())
                 WHERE r.id = d.id
                RETURNING r.state INTO released;
                PERFORM pg_notify(CASE released WHEN 'queued' THEN 'pgqueue_queued'
                                                ELSE 'pgqueue_due' END, d.queue);
            END IF;
        END LOOP;
        EXIT WHEN cardinality(next) = 0;
        frontier := next;
    END LOOP;
    RETURN NULL;
END
$$;
