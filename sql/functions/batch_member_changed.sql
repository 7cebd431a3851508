-- Trigger function of runs_batch_member (AFTER UPDATE on pgqueue.runs, members of a batch
-- whose state changed): notes the change in the transaction's list of batch changes, a
-- transaction-local setting (pgqueue.batch_changes: "<batch>:<code>," per change; code s,
-- f or c for a member that became succeeded, failed or canceled, -s, -f or -c for one
-- that left that state: an operator's retry). pgqueue.batch_flush() adds them up at
-- commit. Appending to a setting costs a member's completion a few microseconds; an
-- UPDATE of its batch's row per member would make every completion of a batch rewrite
-- one row, a chain of row versions that each later update walks.
CREATE OR REPLACE FUNCTION pgqueue.batch_member_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    code text := '';
BEGIN
    IF OLD.state IN ('succeeded', 'failed', 'canceled') THEN
        code := '-' || left(OLD.state, 1) || ',';
    END IF;
    IF NEW.state IN ('succeeded', 'failed', 'canceled') THEN
        code := code || left(NEW.state, 1) || ',';
    END IF;
    IF code <> '' THEN
        PERFORM set_config(
            'pgqueue.batch_changes',
            coalesce(current_setting('pgqueue.batch_changes', true), '')
                || replace(code, ',', ':' || NEW.batch_id || ','),
            true);
    END IF;
    RETURN NULL;
END
$$;
