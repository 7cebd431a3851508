-- Enqueue a batch's callback if the batch is sealed, every member is terminal and no
-- callback was enqueued yet; returns the callback's run id (NULL if none was enqueued).
-- Called with the batch's row locked, by pgqueue.batch_flush() when the last member
-- finishes and by the sealing of a batch (an empty batch completes at once).
-- The callback receives the batch's kwargs plus `batch`, the counts; its idempotency key
-- is derived from the batch, a second guard against a second callback.
CREATE OR REPLACE FUNCTION pgqueue.batch_settle(batch bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    b record;
    callback bigint;
BEGIN
    SELECT * INTO b FROM pgqueue.batches WHERE id = batch_settle.batch;
    IF NOT FOUND OR b.total IS NULL OR b.callback_run_id IS NOT NULL
       OR b.succeeded + b.failed + b.canceled < b.total THEN
        RETURN NULL;
    END IF;
    callback := pgqueue.enqueue(
        b.on_complete,
        '[]'::jsonb,
        b.kwargs || jsonb_build_object('batch', jsonb_build_object(
            'id', b.id, 'total', b.total, 'succeeded', b.succeeded, 'failed', b.failed,
            'canceled', b.canceled)),
        queue => b.queue,
        priority => b.priority,
        max_attempts => b.max_attempts,
        idempotency_key => 'pgqueue.batch:' || b.id);
    UPDATE pgqueue.batches
       SET callback_run_id = callback, completed_at = now()
     WHERE id = b.id;
    RETURN callback;
END
$$;
