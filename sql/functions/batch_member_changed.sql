-- Trigger function of runs_batch_member (AFTER UPDATE OF state on pgqueue.runs, members of
-- a batch only): a member that became terminal adds one to its batch's counter of that
-- state; a member that left a terminal state (an operator's retry) takes its one back.
-- The UPDATE locks the batch's row until the completion's transaction ends, so that
-- concurrent completions add up one after the other and exactly one of them sees the
-- last member finish; pgqueue.batch_settle() then enqueues the callback in that same
-- transaction (a completion that rolls back takes its count and the callback with it).
CREATE OR REPLACE FUNCTION pgqueue.batch_member_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    was_done boolean := OLD.state IN ('succeeded', 'failed', 'canceled');
    is_done boolean := NEW.state IN ('succeeded', 'failed', 'canceled');
    step integer;
    finished integer;
    expected integer;
BEGIN
    IF was_done = is_done THEN
        RETURN NULL;
    END IF;
    step := CASE WHEN is_done THEN 1 ELSE -1 END;
    UPDATE pgqueue.batches b
       SET succeeded = b.succeeded
                       + CASE WHEN NEW.state = 'succeeded' THEN 1
                              WHEN OLD.state = 'succeeded' THEN -1 ELSE 0 END,
           failed = b.failed
                    + CASE WHEN NEW.state = 'failed' THEN 1
                           WHEN OLD.state = 'failed' THEN -1 ELSE 0 END,
           canceled = b.canceled
                      + CASE WHEN NEW.state = 'canceled' THEN 1
                             WHEN OLD.state = 'canceled' THEN -1 ELSE 0 END
     WHERE b.id = NEW.batch_id
    RETURNING b.succeeded + b.failed + b.canceled, b.total INTO finished, expected;
    IF step = 1 AND finished = expected THEN
        PERFORM pgqueue.batch_settle(NEW.batch_id);
    END IF;
    RETURN NULL;
END
$$;
