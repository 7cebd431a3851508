-- Claim up to `limit` queued runs of one queue WITHOUT limits for this worker, in
-- priority then FIFO order, under a fresh lease. Reads only runs_claim_idx; SKIP LOCKED
-- lets many workers claim at once without waiting on each other. A paused queue, or one
-- that has limits (those go through claim_limited), yields nothing.
-- The claim commits asynchronously (synchronous_commit off for this transaction only): it
-- does not wait for its WAL flush. WAL is flushed in order, so the attempt's outcome (or
-- any step, child run or enqueue it writes), which does wait, makes the claim durable
-- too. A server crash can lose only a claim whose attempt wrote nothing yet: the run is
-- `queued` again and runs again (at-least-once, as after an expired lease), and the lost
-- attempt's late outcome is fenced out by its lease token. (claim_limited.sql does not do
-- this: see there.)
WITH picked AS (
    SELECT id
    FROM pgqueue.runs
    WHERE state = 'queued' AND queue = %(queue)s
      AND NOT EXISTS (SELECT 1 FROM pgqueue.queues q
                       WHERE q.name = %(queue)s
                         AND (q.paused OR q.concurrency IS NOT NULL
                              OR q.group_concurrency IS NOT NULL))
    ORDER BY priority, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pgqueue.runs r
   SET state = 'running',
       attempt = r.attempt + 1,
       worker_id = %(worker_id)s,
       lease_token = gen_random_uuid(),
       lease_expires_at = now() + %(lease_seconds)s * interval '1 second',
       started_at = now()
 -- = ANY(ARRAY(...)) rather than a join: a generic plan then still probes the primary
 -- key instead of hashing against a scan of the whole table.
 WHERE r.id = ANY(ARRAY(SELECT id FROM picked))
   AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
RETURNING r.id, r.task, r.queue, r.args, r.kwargs, r.attempt, r.max_attempts,
          r.timeout_seconds, r.lease_token, r.priority, r.group_key, r.parent_id,
          extract(epoch FROM now() - r.run_at)::double precision AS pickup_seconds,
          -- a workflow replaying after a wait or a retry has steps to load; a fresh one
          -- does not, and then a step costs exactly one round trip
          EXISTS (SELECT 1 FROM pgqueue.steps st WHERE st.run_id = r.id) AS has_steps
