-- Enqueue a batch's callback if the batch is sealed, every member is terminal and no
-- callback was enqueued yet; returns the callback's run id (NULL if none was enqueued).
-- It locks the batch's row in pgqueue.batch_heads (until the caller's transaction ends)
-- before it counts: callers that settle the same batch at the same moment take turns,
-- the later one sees the earlier one's callback (and, being a statement after the lock,
-- its committed counts). Called by pgqueue.batch_flush() near a batch's end, by the
-- sealing of a batch (an empty batch completes at once) and by the rescuer's sweep
-- (sql/settle_open_batches.sql).
-- The callback receives the batch's kwargs plus `batch`, the counts; its idempotency key
-- is derived from the batch, a second guard against a second callback.
CREATE OR REPLACE FUNCTION pgqueue.batch_settle(batch bigint) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    b record;
    n record;
    callback bigint;
BEGIN
    SELECT * INTO b FROM pgqueue.batch_heads WHERE id = batch_settle.batch FOR NO KEY UPDATE;
    IF NOT FOUND OR b.total IS NULL OR b.callback_run_id IS NOT NULL THEN
        RETURN NULL;
    END IF;
    SELECT coalesce(sum(c.succeeded), 0)::integer AS succeeded,
           coalesce(sum(c.failed), 0)::integer AS failed,
           coalesce(sum(c.canceled), 0)::integer AS canceled
      INTO n
      FROM pgqueue.batch_counts c
     WHERE c.batch_id = batch_settle.batch;
    IF n.succeeded + n.failed + n.canceled < b.total THEN
        RETURN NULL;
    END IF;
    callback := pgqueue.enqueue(
        b.on_complete,
        '[]'::jsonb,
        b.kwargs || jsonb_build_object('batch', jsonb_build_object(
            'id', b.id, 'total', b.total, 'succeeded', n.succeeded, 'failed', n.failed,
            'canceled', n.canceled)),
        queue => b.queue,
        priority => b.priority,
        max_attempts => b.max_attempts,
        idempotency_key => 'pgqueue.batch:' || b.id);
    UPDATE pgqueue.batch_heads
       SET callback_run_id = callback, completed_at = now()
     WHERE id = b.id;
    RETURN callback;
END
$$;
