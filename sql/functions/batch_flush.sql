-- Trigger function of runs_batch_flush (a constraint trigger, deferred: it fires when the
-- transaction commits, once per transaction that changed members: see
-- pgqueue.batch_note()). Adds the transaction's batch changes to the batches' counters
-- and settles a batch whose last members it may have finished.
--
-- Counters: one row of pgqueue.batch_counts per batch and slot, the slot being this
-- backend's pid modulo 64. Concurrent committers (other backends) mostly update other
-- rows, so they do not wait on each other's commit; two backends in the same slot take
-- turns on that row, which is still correct.
--
-- Settlement: a committer cannot see the counts of the others that are committing at the
-- same moment. So when the batch's remaining members, as this transaction sees them, are
-- few (NEAR_END), it calls pgqueue.batch_settle(), which locks the batch's row in
-- pgqueue.batch_heads until commit and counts again. Those last committers take turns on
-- that lock, and each counts after the previous one committed: the last of them sees
-- every count and enqueues the callback. That holds while fewer than NEAR_END members
-- are being finished by transactions committing at the same time; beyond that (a bulk
-- cancel racing the workers, say) everyone may miss the end, and the rescuer's sweep of
-- sealed, unsettled batches whose counts are complete (sql/settle_open_batches.sql)
-- enqueues the callback. pgqueue.batch_settle() checks, under the row lock, that none was
-- enqueued yet: the callback is enqueued once, whichever path gets there.
CREATE OR REPLACE FUNCTION pgqueue.batch_flush() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    near_end CONSTANT integer := 1000;
    changes text := current_setting('pgqueue.batch_changes', true);
    my_slot smallint := pg_backend_pid() % 64;
    d record;
    expected integer;
    finished bigint;
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
        UPDATE pgqueue.batch_counts c
           SET succeeded = c.succeeded + d.succeeded,
               failed = c.failed + d.failed,
               canceled = c.canceled + d.canceled
         WHERE c.batch_id = d.batch AND c.slot = my_slot;
        IF NOT FOUND THEN
            INSERT INTO pgqueue.batch_counts AS c (batch_id, slot, succeeded, failed, canceled)
            VALUES (d.batch, my_slot, d.succeeded, d.failed, d.canceled)
            ON CONFLICT (batch_id, slot) DO UPDATE
               SET succeeded = c.succeeded + excluded.succeeded,
                   failed = c.failed + excluded.failed,
                   canceled = c.canceled + excluded.canceled;
        END IF;
        SELECT h.total INTO expected
        FROM pgqueue.batch_heads h
        WHERE h.id = d.batch AND h.completed_at IS NULL;
        CONTINUE WHEN expected IS NULL;  -- settled already (or not sealed)
        SELECT coalesce(sum(c.succeeded + c.failed + c.canceled), 0) INTO finished
        FROM pgqueue.batch_counts c
        WHERE c.batch_id = d.batch;
        IF finished >= expected - near_end THEN
            PERFORM pgqueue.batch_settle(d.batch);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
