-- Claim up to `limit` queued runs of one queue WITHOUT limits for this worker, in
-- priority then FIFO order, under a fresh lease. Reads only runs_claim_idx; SKIP LOCKED
-- lets many workers claim at once without waiting on each other. A paused queue, one
-- backed off (RetryAfter(scope="queue")), or one that has limits (those go through
-- claim_limited, and so does a queue with a group backoff), yields nothing.
-- The claim commits asynchronously (synchronous_commit off for this transaction only): it
-- does not wait for its WAL flush. WAL is flushed in order, so the attempt's outcome (or
-- any step, child run or enqueue it writes), which does wait, makes the claim durable
-- too. A server crash can lose only a claim whose attempt wrote nothing yet: the run is
-- `queued` again and runs again (at-least-once, as after an expired lease), and the lost
-- attempt's late outcome is fenced out by its lease token. (claim_limited.sql does not do
-- this: see there.)
-- Where to start: (after_priority, after_id) is the largest (priority, id) this worker's
-- last claim of the queue took; (-32768, 0) starts at the front. Every run claimed since
-- the last VACUUM leaves a dead entry at the front of runs_claim_idx, and a claim from the
-- front reads through all of them (a page per ~260 runs).
-- Three scans, each run only if those before it found fewer than `limit`:
--   ahead:  more urgent priorities than the mark's (enqueued since): from the front;
--   onward: from the mark on, in order;
--   behind: the mark's priority before the mark: runs that came back to the queue
--           (retries, wakes, rescues) or whose enqueue committed late. When `onward`
--           fills the batch they wait for the worker's next claim from the front, at
--           most FRONT_EVERY (0.1 s) later (ClaimMarks in pgqueue/worker/semaphores.py).
WITH open AS (
    SELECT NOT EXISTS (SELECT 1 FROM pgqueue.queues q
                        WHERE q.name = %(queue)s
                          AND (q.paused OR q.backoff_until > now()
                               OR {{queue_has_limits}})) AS yes
),
ahead AS (
    SELECT ctid FROM pgqueue.runs
    WHERE state = 'queued' AND queue = %(queue)s AND (SELECT yes FROM open)
      AND priority < %(after_priority)s
    ORDER BY priority, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
onward AS (
    SELECT ctid FROM pgqueue.runs
    WHERE state = 'queued' AND queue = %(queue)s AND (SELECT yes FROM open)
      AND (priority, id) > (%(after_priority)s, %(after_id)s)
    ORDER BY priority, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
behind AS (
    SELECT ctid FROM pgqueue.runs
    WHERE state = 'queued' AND queue = %(queue)s AND (SELECT yes FROM open)
      -- Row comparisons only, no `priority = ...`: runs_claim_idx serves them, and the
      -- primary key cannot give their order (with an equality on priority, a generic
      -- plan may walk the primary key through the whole history instead).
      AND (priority, id) >= (%(after_priority)s, 0)
      AND (priority, id) <= (%(after_priority)s, %(after_id)s)
    ORDER BY priority, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT ctid FROM ahead
    UNION ALL SELECT ctid FROM onward
    UNION ALL SELECT ctid FROM behind
    LIMIT %(limit)s
)
UPDATE pgqueue.runs r
   SET state = 'running',
       attempt = r.attempt + 1,
       worker_id = %(worker_id)s,
       -- One random token per claim: the lease of a run is its id and this token, and
       -- every write that a lease fences matches both (complete.sql, renew_leases.sql,
       -- record_step.sql). gen_random_uuid() per run cost about a tenth of a claim's
       -- server CPU (bench/RESULTS.md).
       lease_token = (SELECT gen_random_uuid()),
       lease_expires_at = now() + %(lease_seconds)s * interval '1 second',
       started_at = now()
 -- By the row versions the scans above locked (a TID scan): no second descent of the
 -- primary key per run (about 5% of the server's CPU in a drain: bench/RESULTS.md). A
 -- version locked here cannot move or go before the statement ends. Had
 -- another transaction updated a run after this statement's snapshot was taken, the
 -- lock above went to its newest version, which this snapshot does not see: that run is
 -- left out of this claim (still queued; the lock ends with the transaction). = ANY(ARRAY
 -- (...)) rather than a join: a generic plan then still fetches by TID instead of
 -- hashing against a scan of the whole table.
 WHERE r.ctid = ANY(ARRAY(SELECT ctid FROM picked))
   AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
-- The lease token goes out as text: the worker only hands it back (a UUID object per run
-- cost ~0.7 us of worker CPU to parse and print again, for nothing).
RETURNING r.id, r.task, r.queue, r.args, r.kwargs, r.attempt, r.max_attempts,
          r.timeout_seconds, r.lease_token::text AS lease_token, r.priority, r.group_key,
          r.parent_id,
          extract(epoch FROM now() - r.run_at)::double precision AS pickup_seconds,
          -- a workflow replaying after a wait or a retry has steps to load; a fresh one
          -- does not, and then a step costs exactly one round trip
          EXISTS (SELECT 1 FROM pgqueue.steps st WHERE st.run_id = r.id) AS has_steps,
          -- trace context stored at enqueue (pgqueue.contrib.otel); NULL without tracing
          r.headers
