-- Called by the WHEN condition of the trigger runs_batch_flush, for each member of a batch
-- whose state changed: notes the change in the transaction's list of batch changes, a
-- transaction-local setting (pgqueue.batch_changes: "<code>:<batch>," per change; code
-- s, f or c for a member that became succeeded, failed or canceled, -s, -f or -c for one
-- that left that state: an operator's retry). True only for the first change of the
-- transaction: the trigger, deferred to the commit, is queued once per transaction and
-- pgqueue.batch_flush() adds all the changes up. (A WHEN condition is evaluated when the
-- row changes, even for a deferred trigger.) Appending to a setting costs a member's
-- change a few microseconds; an UPDATE of its batch's row per member would make every
-- completion of a batch rewrite one row, a chain of row versions that each later update
-- walks, and concurrent completions wait on it.
CREATE OR REPLACE FUNCTION pgqueue.batch_note(old_state text, new_state text, batch bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    seen text := coalesce(current_setting('pgqueue.batch_changes', true), '');
    code text := '';
BEGIN
    IF old_state IN ('succeeded', 'failed', 'canceled') THEN
        code := '-' || left(old_state, 1) || ':' || batch || ',';
    END IF;
    IF new_state IN ('succeeded', 'failed', 'canceled') THEN
        code := code || left(new_state, 1) || ':' || batch || ',';
    END IF;
    IF code = '' THEN
        RETURN false;
    END IF;
    PERFORM set_config('pgqueue.batch_changes', seen || code, true);
    RETURN seen = '';
END
$$;
