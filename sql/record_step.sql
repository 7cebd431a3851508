-- Record a step, fenced by the lease: the run row is share-locked while the lease is
-- valid, so a rescue cannot slip in between the check and the write. A succeeded step
-- is never overwritten. A step is 'running' while its body runs, 'waiting' while the run
-- waits on it (neither has finished); what a step waited for (waited) is kept once set.
-- position and call say what the step was last called as (the determinism check).
-- Returns nothing if the lease is gone.
-- A 'running' row only shows what is running now (nothing reads it back: a replay looks
-- for 'succeeded'), so it commits without waiting for its WAL flush (synchronous_commit
-- off for this transaction): a crash can lose it, never a finished step, whose own commit
-- flushes it along. A step then costs one commit flush, not two.
WITH lease AS (
    SELECT id
    FROM pgqueue.runs
    WHERE id = %(run_id)s AND lease_token = %(lease_token)s AND state = 'running'
      AND lease_expires_at > now()
      AND (%(state)s <> 'running'
           OR (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL)
    FOR SHARE
)
INSERT INTO pgqueue.steps AS s (run_id, name, state, output, error, attempt, started_at,
                                finished_at, waited, position, call)
SELECT id, %(name)s, %(state)s, %(output)s::jsonb, %(error)s, %(attempt)s, %(started_at)s,
       CASE WHEN %(state)s IN ('waiting', 'running') THEN NULL ELSE now() END, %(waited)s::jsonb,
       %(position)s::integer, %(call)s::text
FROM lease
ON CONFLICT (run_id, name) DO UPDATE
   SET state = EXCLUDED.state, output = EXCLUDED.output, error = EXCLUDED.error,
       attempt = EXCLUDED.attempt, started_at = EXCLUDED.started_at,
       finished_at = EXCLUDED.finished_at, waited = coalesce(EXCLUDED.waited, s.waited),
       position = coalesce(EXCLUDED.position, s.position), call = coalesce(EXCLUDED.call, s.call)
 WHERE s.state <> 'succeeded'
RETURNING s.name, s.created_at, now() AS db_now
