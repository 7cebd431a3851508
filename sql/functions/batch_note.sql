-- Called by the WHEN condition of the trigger runs_batch_flush for each member of a batch
-- that enters or leaves a terminal state: adds the change to the transaction's batch
-- changes, a transaction-local setting (pgqueue.batch_changes) of entries
-- "<batch>:<succeeded>:<failed>:<canceled>" separated by commas (deltas: +1 for a member
-- that became that state, -1 for one that left it, an operator's retry). A change of the
-- batch of the last entry adds to that entry, so a transaction that finishes many members
-- of one batch (a completion, a bulk cancel) keeps one short entry. True for the
-- transaction's first change: the deferred trigger is queued once per transaction (a
-- WHEN condition is evaluated when the row changes, even for a deferred trigger), and at
-- commit pgqueue.batch_flush() adds the entries up.
-- One SELECT of built-in calls, so the planner inlines it into the trigger's condition:
-- no function call per member. (An UPDATE of the batch's row per member would make every
-- completion of a batch rewrite one row, a chain of row versions that each later update
-- walks, and concurrent completions would wait on it.)
CREATE OR REPLACE FUNCTION pgqueue.batch_note(old_state text, new_state text, batch bigint)
RETURNS boolean
LANGUAGE sql AS $$
SELECT set_config(
    'pgqueue.batch_changes',
    CASE
        WHEN coalesce(current_setting('pgqueue.batch_changes', true), '') = ''
            THEN concat_ws(':', batch,
                           (new_state = 'succeeded')::integer - (old_state = 'succeeded')::integer,
                           (new_state = 'failed')::integer - (old_state = 'failed')::integer,
                           (new_state = 'canceled')::integer - (old_state = 'canceled')::integer)
        WHEN split_part(split_part(current_setting('pgqueue.batch_changes'), ',', -1), ':', 1)
             = batch::text
            THEN left(current_setting('pgqueue.batch_changes'),
                      length(current_setting('pgqueue.batch_changes'))
                      - length(split_part(current_setting('pgqueue.batch_changes'), ',', -1)))
                 || concat_ws(':', batch,
                              split_part(split_part(current_setting('pgqueue.batch_changes'),
                                                    ',', -1), ':', 2)::integer
                              + (new_state = 'succeeded')::integer
                              - (old_state = 'succeeded')::integer,
                              split_part(split_part(current_setting('pgqueue.batch_changes'),
                                                    ',', -1), ':', 3)::integer
                              + (new_state = 'failed')::integer
                              - (old_state = 'failed')::integer,
                              split_part(split_part(current_setting('pgqueue.batch_changes'),
                                                    ',', -1), ':', 4)::integer
                              + (new_state = 'canceled')::integer
                              - (old_state = 'canceled')::integer)
        ELSE current_setting('pgqueue.batch_changes') || ','
             || concat_ws(':', batch,
                          (new_state = 'succeeded')::integer - (old_state = 'succeeded')::integer,
                          (new_state = 'failed')::integer - (old_state = 'failed')::integer,
                          (new_state = 'canceled')::integer - (old_state = 'canceled')::integer)
    END,
    true)
  = concat_ws(':', batch,
              (new_state = 'succeeded')::integer - (old_state = 'succeeded')::integer,
              (new_state = 'failed')::integer - (old_state = 'failed')::integer,
              (new_state = 'canceled')::integer - (old_state = 'canceled')::integer)
$$;
