-- Called by the WHEN condition of the trigger runs_batch_flush for each member of a batch
-- that enters or leaves a terminal state: adds the change to the transaction's batch
-- changes, a transaction-local setting (pgqueue.batch_changes) of entries
-- "<batch>:<succeeded>:<failed>:<canceled>" separated by commas (deltas: +1 for a member
-- that became that state, -1 for one that left it, an operator's retry). A change of the
-- batch of the last entry adds to that entry, so a transaction that finishes many members
-- of one batch (a completion, a bulk cancel) keeps one short entry. True for the
-- transaction's first change only: the deferred trigger is queued once per transaction (a
-- WHEN condition is evaluated when the row changes, even for a deferred trigger), and at
-- commit pgqueue.batch_flush() adds the entries up. (An UPDATE of the batch's row per
-- member would make every completion of a batch rewrite one row, a chain of row versions
-- that each later update walks, and concurrent completions would wait on it.)
--
-- PL/pgSQL, not an SQL function: the server prepares a trigger's WHEN condition once per
-- statement that updates runs, and an SQL function in it is inlined there, its body parsed
-- and analysed again each time: about 2 us per run of every claim and completion, batch or
-- not (bench/RESULTS.md). A PL/pgSQL function is compiled once per connection and only
-- called for members of a batch (the condition tests batch_id first).
CREATE OR REPLACE FUNCTION pgqueue.batch_note(old_state text, new_state text, batch bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    succeeded integer := (new_state = 'succeeded')::integer - (old_state = 'succeeded')::integer;
    failed integer := (new_state = 'failed')::integer - (old_state = 'failed')::integer;
    canceled integer := (new_state = 'canceled')::integer - (old_state = 'canceled')::integer;
    changes text := coalesce(current_setting('pgqueue.batch_changes', true), '');
    last text;
BEGIN
    IF changes = '' THEN
        PERFORM set_config('pgqueue.batch_changes',
                           concat_ws(':', batch, succeeded, failed, canceled), true);
        RETURN true;
    END IF;
    last := split_part(changes, ',', -1);
    IF split_part(last, ':', 1) = batch::text THEN
        PERFORM set_config(
            'pgqueue.batch_changes',
            left(changes, length(changes) - length(last))
                || concat_ws(':', batch,
                             split_part(last, ':', 2)::integer + succeeded,
                             split_part(last, ':', 3)::integer + failed,
                             split_part(last, ':', 4)::integer + canceled),
            true);
    ELSE
        PERFORM set_config('pgqueue.batch_changes',
                           changes || ',' || concat_ws(':', batch, succeeded, failed, canceled),
                           true);
    END IF;
    RETURN false;
END
$$;
