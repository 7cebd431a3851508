-- Put a finished run back in its queue for one more attempt; the retry is recorded. The
-- run's last error and cancel reason are cleared (a queued run shows none); every
-- attempt's error stays in pgqueue.run_errors.
CREATE OR REPLACE FUNCTION pgqueue.retry(run_id bigint) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    q text;
BEGIN
    UPDATE pgqueue.runs
       SET state = 'queued', run_at = now(), finished_at = NULL, result = NULL,
           error = NULL, cancel_reason = NULL,
           max_attempts = greatest(max_attempts, attempt + 1)
     WHERE id = run_id AND state IN ('succeeded', 'failed', 'canceled')
    RETURNING queue INTO q;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO pgqueue.run_errors (run_id, attempt, kind, message)
    SELECT id, attempt, 'retried', 'retried by an operator' FROM pgqueue.runs WHERE id = run_id;
    PERFORM pg_notify('pgqueue_queued', q);
    RETURN true;
END
$$;
