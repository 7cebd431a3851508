-- Trigger function of runs_batch_flush (a constraint trigger, deferred: it fires when the
-- transaction commits, once per transaction that changed members: see
-- pgqueue.batch_note()). Adds the transaction's batch changes to the counters of
-- pgqueue.batches: one UPDATE per batch and transaction, in batch id order (concurrent
-- committers lock batches in the same order). The row lock makes concurrent commits add
-- up one after the other and is held only while they commit; exactly one of them sees a
-- batch's count reach its total, and pgqueue.batch_settle() enqueues the callback in that
-- transaction (if it rolls back, the count and the callback go with it).
CREATE OR REPLACE FUNCTION pgqueue.batch_flush() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changes text := current_setting('pgqueue.batch_changes', true);
    d record;
    finished integer;
    expected integer;
BEGIN
    IF changes IS NULL OR changes = '' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('pgqueue.batch_changes', '', true);
    FOR d IN
        SELECT split_part(x, ':', 1)::bigint AS batch,
               sum(split_part(x, ':', 2)::integer) AS succeeded,
               sum(split_part(x, ':', 3)::integer) AS failed,
               sum(split_part(x, ':', 4)::integer) AS canceled
        FROM string_to_table(changes, ',') AS x
        GROUP BY 1
        ORDER BY 1
    LOOP
        UPDATE pgqueue.batches b
           SET succeeded = b.succeeded + d.succeeded,
               failed = b.failed + d.failed,
               canceled = b.canceled + d.canceled
         WHERE b.id = d.batch
        RETURNING b.succeeded + b.failed + b.canceled, b.total INTO finished, expected;
        IF finished = expected THEN
            -- conditional: a batch whose callback was enqueued gets no second one
            PERFORM pgqueue.batch_settle(d.batch);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
