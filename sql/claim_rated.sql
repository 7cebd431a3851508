-- Claim up to `limit` queued runs of a queue whose only limit is a queue-level rate limit
-- (rate_limit; no concurrency, group limits or ordering: those go through
-- claim_limited()), in priority then FIFO order, as claim.sql does, and no more than
-- the rate limit leaves in its period. A queue backed off (RetryAfter(scope="queue")),
-- or with a group backoff in force (claim_limited() claims it meanwhile), yields nothing. The queue's row lock makes claimers of the queue
-- take turns: `q` waits for it, then reads the row's newest version (READ COMMITTED
-- rechecks a locked row), so the rate log it counts includes every claim before it.
-- `room` is evaluated after the lock: its clock stamps this claim's starts, in lock
-- order (EXPLAIN VERBOSE: clock_timestamp() is computed in the scan of q). The log is
-- read and written here, with no function call: each call of a function that the
-- planner does not inline cost more than the arithmetic (bench/RESULTS.md, "Rate
-- limits"). It is the one pgqueue.rate_log_add() keeps (tests/worker/
-- test_flow_control.py checks that they agree): entries in time order, each slot
-- rounded up to a fiftieth of the period. `room` counts the entries at or after
-- stamp - period (`kept`: the last ones, the log being in time order) and their starts
-- (`used`, as pgqueue.rate_used()); `log` keeps those entries and adds this claim's
-- starts to the newest one if its slot is this stamp's or later, else as a new slot.
-- rate_open_at is set when the claim's starts filled the limit: the oldest entry kept
-- plus the period (pgqueue.rate_opens(); the worker sleeps until then). A run left out
-- stays `queued`: no attempt used. The runs of such a queue are not flagged `limited`
-- (sql/parts/queue_flags_runs.sql): this claim reads runs_claim_idx only. The scans are
-- claim.sql's (after_priority, after_id: ClaimMarks), each with LIMIT the room left.
-- Like claim.sql it commits asynchronously (its claimers wait on each other's commits:
-- a WAL flush per claim would bound the queue's claims per second); a server crash can
-- lose only a claim whose attempts wrote nothing yet, and with it its starts from the
-- log: those runs run again, and the limit can be passed once, by them
-- (docs/flow_control.md). Without its comments the text must stay under psycopg's
-- cached length (pgqueue/_sql.py).
WITH q AS (
    SELECT rate_limit, rate_period, rate_slots, rate_counts
      FROM pgqueue.queues q
     WHERE name = %(queue)s AND NOT paused AND rate_limit IS NOT NULL
       AND (concurrency, group_concurrency, group_rate_limit) IS NULL AND NOT ordered
       AND greatest(backoff_until, group_backoff_until, now()) <= now()
       FOR UPDATE
),
room AS (
    SELECT greatest(0, least(%(limit)s, c.rate_limit - u.used)) AS n, u.*, c.*
      FROM (SELECT q.*, clock_timestamp() AS stamp FROM q) c
     CROSS JOIN LATERAL (SELECT coalesce(sum(l.n), 0)::integer AS used,
                                count(*)::integer AS kept
                           FROM unnest(c.rate_slots, c.rate_counts) AS l(slot, n)
                          WHERE l.slot >= c.stamp - c.rate_period * interval '1 second') u
),
-- the room as a LIMIT: 0 when the queue's row was not taken
lim AS (SELECT coalesce(max(n), 0) AS n FROM room),
ahead AS (
    SELECT ctid FROM pgqueue.runs
    WHERE state = 'queued' AND queue = %(queue)s
      AND priority < %(after_priority)s
    ORDER BY priority, id
    LIMIT (SELECT n FROM lim)
    FOR UPDATE SKIP LOCKED
),
onward AS (
    SELECT ctid FROM pgqueue.runs
    WHERE state = 'queued' AND queue = %(queue)s
      AND (priority, id) > (%(after_priority)s, %(after_id)s)
    ORDER BY priority, id
    LIMIT (SELECT n FROM lim)
    FOR UPDATE SKIP LOCKED
),
behind AS (
    SELECT ctid FROM pgqueue.runs
    WHERE state = 'queued' AND queue = %(queue)s
      AND (priority, id) >= (%(after_priority)s, 0)
      AND (priority, id) <= (%(after_priority)s, %(after_id)s)
    ORDER BY priority, id
    LIMIT (SELECT n FROM lim)
    FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT ctid FROM ahead
    UNION ALL SELECT ctid FROM onward
    UNION ALL SELECT ctid FROM behind
    LIMIT (SELECT n FROM lim)
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
    -- what the result needs, not r.*: the CTE keeps its rows until the statement ends
    RETURNING r.id, r.task, r.queue, r.args, r.kwargs, r.attempt, r.max_attempts,
              r.timeout_seconds, r.lease_token, r.priority, r.group_key, r.parent_id,
              r.run_at, r.headers
),
log AS (
    SELECT t.*, r.used, r.kept, r.rate_limit AS lim, r.rate_period AS period,
           t.added > 0 AND (r.kept = 0 OR t.slots[r.kept] < t.slot) AS grows
      FROM room r
     CROSS JOIN LATERAL (
        SELECT (SELECT count(*) FROM claimed)::integer AS added,
               to_timestamp(ceil(extract(epoch FROM r.stamp) / (r.rate_period / 50))
                            * (r.rate_period / 50)) AS slot,
               r.rate_slots[cardinality(r.rate_slots) - r.kept + 1:] AS slots,
               r.rate_counts[cardinality(r.rate_counts) - r.kept + 1:] AS counts) t
),
logged AS (
    UPDATE pgqueue.queues u
       SET (rate_slots, rate_counts, rate_open_at) = (
           SELECT CASE WHEN grows THEN slots || slot ELSE slots END,
                  CASE WHEN grows THEN counts || added
                       WHEN added > 0 THEN counts[:kept - 1] || (counts[kept] + added)
                       ELSE counts END,
                  CASE WHEN used + added >= lim
                       THEN coalesce(slots[1], slot) + period * interval '1 second' END
             FROM log)
     WHERE u.name = %(queue)s AND EXISTS (SELECT 1 FROM room)
       AND ((SELECT added FROM log) > 0
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
