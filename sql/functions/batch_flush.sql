-- Trigger function of runs_batch_flush (a constraint trigger, deferred: it fires when the
-- transaction commits, once per transaction that changed members: see
-- pgqueue.batch_note()). Adds the transaction's batch changes to the counters of
-- pgqueue.batches: one UPDATE per
-- batch and transaction, in batch id order (concurrent committers lock batches in the
-- same order). The row lock makes concurrent completions add up one after the other and
-- is held only while their transactions commit; exactly one of them sees a batch's count
-- reach its total, and pgqueue.batch_settle() enqueues the callback in that transaction
-- (if it rolls back, the count and the callback go with it).
CREATE OR REPLACE FUNCTION pgqueue.batch_flush() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changes text := current_setting('pgqueue.batch_changes', true);
    c record;
    finished integer;
    expected integer;
BEGIN
    IF changes IS NULL OR changes = '' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('pgqueue.batch_changes', '', true);
    FOR c IN
        SELECT split_part(x, ':', 2)::bigint AS batch,
               sum(CASE split_part(x, ':', 1) WHEN 's' THEN 1 WHEN '-s' THEN -1 ELSE 0 END)
                   AS succeeded,
               sum(CASE split_part(x, ':', 1) WHEN 'f' THEN 1 WHEN '-f' THEN -1 ELSE 0 END)
                   AS failed,
               sum(CASE split_part(x, ':', 1) WHEN 'c' THEN 1 WHEN '-c' THEN -1 ELSE 0 END)
                   AS canceled,
               bool_or(split_part(x, ':', 1) NOT LIKE '-%') AS finishing
        FROM string_to_table(rtrim(changes, ','), ',') AS x
        GROUP BY 1
        ORDER BY 1
    LOOP
        UPDATE pgqueue.batches b
           SET succeeded = b.succeeded + c.succeeded,
               failed = b.failed + c.failed,
               canceled = b.canceled + c.canceled
         WHERE b.id = c.batch
        RETURNING b.succeeded + b.failed + b.canceled, b.total INTO finished, expected;
        IF c.finishing AND finished = expected THEN
            PERFORM pgqueue.batch_settle(c.batch);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
