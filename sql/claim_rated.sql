-- Claim up to `limit` queued runs of a queue whose only limit is a queue-level rate limit
-- (rate_limit; no concurrency, group limits or ordering: those go through
-- claim_limited()), in priority then FIFO order, as claim.sql does, and no more than
-- the rate limit leaves in its period. The queue's row lock makes claimers of the queue
-- take turns: `q` waits for it, then reads the row's newest version (READ COMMITTED
-- rechecks a locked row), so the rate log it counts includes every claim before it.
-- `room` is evaluated after the lock: its clock stamps this claim's starts, in lock
-- order, and `used` is what pgqueue.rate_used() would say of the log at that stamp,
-- written out here (a call of that SQL function, not inlined, cost more than the sum).
-- `logged` adds the starts to the log (pgqueue.rate_log_add, which drops the entries
-- older than the period and keeps the rest in time order) and writes rate_open_at, when
-- the claim's starts filled the limit: the oldest entry left plus the period (the worker
-- sleeps until then). A run left out stays `queued`: no attempt used. The runs of such a
-- queue are not flagged `limited` (sql/parts/queue_flags_runs.sql): this claim reads
-- runs_claim_idx only. The scans are claim.sql's
-- (after_priority, after_id: ClaimMarks), each with LIMIT the room left. Like claim.sql
-- it commits asynchronously (its claimers wait on each other's commits: a WAL flush per
-- claim would bound the queue's claims per second); a server crash can lose only a
-- claim whose attempts wrote nothing yet, and with it its starts from the log: those
-- runs run again, and the limit can be passed once, by them (docs/flow_control.md).
WITH q AS (
    SELECT q.rate_limit, q.rate_period, q.rate_slots, q.rate_counts
      FROM pgqueue.queues q
     WHERE q.name = %(queue)s AND NOT q.paused AND q.rate_limit IS NOT NULL
       AND q.concurrency IS NULL AND q.group_concurrency IS NULL
       AND q.group_rate_limit IS NULL AND NOT q.ordered
       FOR UPDATE
),
room AS (
    SELECT greatest(0, least(%(limit)s, c.rate_limit - u.used)) AS n, u.used, c.stamp
      FROM (SELECT q.*, clock_timestamp() AS stamp FROM q) c
     CROSS JOIN LATERAL (SELECT coalesce(sum(l.n), 0)::integer AS used
                           FROM unnest(c.rate_slots, c.rate_counts) AS l(slot, n)
                          WHERE l.slot >= c.stamp - c.rate_period * interval '1 second') u
),
ahead AS (
    SELECT ctid FROM pgqueue.runs
    WHERE state = 'queued' AND queue = %(queue)s
      AND priority < %(after_priority)s
    ORDER BY priority, id
    LIMIT (SELECT coalesce(max(n), 0) FROM room)
    FOR UPDATE SKIP LOCKED
),
onward AS (
    SELECT ctid FROM pgqueue.runs
    WHERE state = 'queued' AND queue = %(queue)s
      AND (priority, id) > (%(after_priority)s, %(after_id)s)
    ORDER BY priority, id
    LIMIT (SELECT coalesce(max(n), 0) FROM room)
    FOR UPDATE SKIP LOCKED
),
behind AS (
    SELECT ctid FROM pgqueue.runs
    WHERE state = 'queued' AND queue = %(queue)s
      AND (priority, id) >= (%(after_priority)s, 0)
      AND (priority, id) <= (%(after_priority)s, %(after_id)s)
    ORDER BY priority, id
    LIMIT (SELECT coalesce(max(n), 0) FROM room)
    FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT ctid FROM ahead
    UNION ALL SELECT ctid FROM onward
    UNION ALL SELECT ctid FROM behind
    LIMIT (SELECT coalesce(max(n), 0) FROM room)
),
claimed AS (
    UPDATE pgqueue.runs r
       SET state = 'running',
           attempt = r.attempt + 1,
           worker_id = %(worker_id)s,
           lease_token = (SELECT gen_random_uuid()),
           lease_expires_at = now() + %(lease_seconds)s * interval '1 second',
           started_at = (SELECT stamp FROM room)
     WHERE r.ctid = ANY(ARRAY(SELECT ctid FROM picked))
       AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
    RETURNING r.*
),
logged AS (
    UPDATE pgqueue.queues u
       SET (rate_slots, rate_counts, rate_open_at) = (
           SELECT l.slots, l.counts,
                  CASE WHEN (SELECT used FROM room) + (SELECT count(*) FROM claimed)
                            >= u.rate_limit
                       THEN l.slots[1] + u.rate_period * interval '1 second' END
             FROM pgqueue.rate_log_add(u.rate_slots, u.rate_counts,
                                       (SELECT count(*) FROM claimed)::integer,
                                       (SELECT stamp FROM room), u.rate_period) l)
     WHERE u.name = %(queue)s AND EXISTS (SELECT 1 FROM room)
       AND ((SELECT count(*) FROM claimed) > 0
            OR (SELECT n FROM room) < %(limit)s
            OR u.rate_open_at IS NOT NULL)
)
SELECT c.id, c.task, c.queue, c.args, c.kwargs, c.attempt, c.max_attempts,
       c.timeout_seconds, c.lease_token::text AS lease_token, c.priority, c.group_key,
       c.parent_id,
       extract(epoch FROM now() - c.run_at)::double precision AS pickup_seconds,
       EXISTS (SELECT 1 FROM pgqueue.steps st WHERE st.run_id = c.id) AS has_steps,
       c.headers
FROM claimed c
