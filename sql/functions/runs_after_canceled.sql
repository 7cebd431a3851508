-- Trigger function of runs_after_canceled (AFTER INSERT on runs, for a run whose
-- dependency had failed or been canceled before it was enqueued, under the policy
-- 'cancel': runs_enqueue_after() left it `waiting` with the reason in cancel_reason).
-- Canceled through pgqueue.cancel(), as any cancel: an UPDATE, which the batch counters
-- (runs_batch_flush), a waiting parent and RunHandle.wait() hear of.
CREATE OR REPLACE FUNCTION pgqueue.runs_after_canceled() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    PERFORM pgqueue.cancel(NEW.id, false, NEW.cancel_reason);
    RETURN NULL;
END
$$;
