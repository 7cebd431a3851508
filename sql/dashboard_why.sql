-- The facts behind "why is this run not running", for runs that are scheduled, queued
-- or waiting, read by the rules the worker's claim uses (claim.sql, claim_limited()):
-- a paused queue yields nothing; a permit is a `running` run of the queue (and of the
-- group) under a lease that has not expired, or an attempt whose code runs on in a live
-- worker after its outcome was written or its run canceled (pgqueue.zombie_permits,
-- counted while its worker beats, as claim_limited() counts it); the stager and the claim run only in live
-- workers that serve the queue; unlimited queues are claimed in (priority, id) order; a
-- rate limit counts the starts of its last period (pgqueue.rate_used); an ordered group
-- takes its runs only once every earlier one is finished (runs_group_order_idx). How
-- many runs are ahead of a queued one is its place among the first 1,001 of its queue
-- (priority, then id: runs_claim_idx), read once per queue, whatever the number of runs
-- asked about; a run beyond them has 1,000 or more ahead (the dashboard then asks the
-- planner for an estimate: dashboard_ahead_estimate.sql).
-- Every count reads the partial index of its state, keyed by queue. `q` is
-- MATERIALIZED: its counts are made once per queue, not once per run asked about (inlined,
-- the count of busy slots ran 500 times for a page of 500 runs: 47 of its 68 ms).
WITH r AS (
    SELECT id, queue, state, group_key, priority, run_at, attempt, error, limited,
           wait_event, wait_key, wait_run_id, after
    FROM pgqueue.runs
    WHERE id = ANY (%(ids)s::bigint[]) AND state IN ('scheduled', 'queued', 'waiting')
),
live AS (
    SELECT w.id, w.queues, w.concurrency
    FROM pgqueue.workers w
    WHERE w.heartbeat_at > now() - interval '60 seconds'
),
held AS (
    SELECT h.id, h.queue, h.group_key
    FROM pgqueue.runs h
    WHERE h.state = 'running' AND h.queue IN (SELECT queue FROM r) AND h.lease_expires_at > now()
    UNION ALL
    SELECT z.run_id, z.queue, z.group_key
    FROM pgqueue.zombie_permits z
    JOIN pgqueue.workers w ON w.id = z.worker_id
    WHERE z.queue IN (SELECT queue FROM r)
      AND w.heartbeat_at > now() - z.lease_seconds * interval '1 second'
),
heads AS (
    SELECT n.queue, x.id, x.ahead
    FROM (SELECT DISTINCT queue FROM r WHERE state = 'queued') n
    CROSS JOIN LATERAL (
        SELECT a.id, row_number() OVER (ORDER BY a.priority, a.id) - 1 AS ahead
        FROM (SELECT priority, id FROM pgqueue.runs
               WHERE state = 'queued' AND queue = n.queue
               ORDER BY priority, id
               LIMIT 1001) a
    ) x
),
q AS MATERIALIZED (
    SELECT n.queue, coalesce(x.paused, false) AS paused, x.concurrency, x.group_concurrency,
           x.rate_limit, x.rate_period, x.group_rate_limit, x.group_rate_period,
           coalesce(x.ordered, false) AS ordered, x.rate_open_at,
           x.group_weights IS NOT NULL AS weighted,
           pgqueue.rate_used(x.rate_slots, x.rate_counts,
                             now() - x.rate_period * interval '1 second') AS rate_used,
           (SELECT count(*) FROM live w WHERE n.queue = ANY (w.queues)) AS live_workers,
           (SELECT coalesce(sum(w.concurrency), 0) FROM live w WHERE n.queue = ANY (w.queues))
               AS slots,
           (SELECT count(*) FROM pgqueue.runs h
             WHERE h.state = 'running'
               AND h.worker_id IN (SELECT w.id FROM live w WHERE n.queue = ANY (w.queues)))
               AS busy,
           (SELECT count(*) FROM held h WHERE h.queue = n.queue) AS permits_taken,
           ARRAY(SELECT h.id FROM held h WHERE h.queue = n.queue ORDER BY h.id LIMIT 10)
               AS permit_holders
    FROM (SELECT DISTINCT queue FROM r) n
    LEFT JOIN pgqueue.queues x ON x.name = n.queue
)
SELECT r.id, r.queue, r.state, r.group_key, r.priority, r.run_at, r.attempt, r.error, r.wait_event,
       r.wait_key, r.wait_run_id, q.paused, q.concurrency, q.group_concurrency,
       q.live_workers, q.slots, q.busy, q.permits_taken, q.permit_holders,
       g.taken AS group_taken, g.holders AS group_holders,
       q.rate_limit, q.rate_period, q.rate_used, q.rate_open_at,
       q.group_rate_limit, q.group_rate_period, q.ordered, q.weighted,
       (SELECT pgqueue.rate_used(gr.rate_slots, gr.rate_counts,
                                 now() - q.group_rate_period * interval '1 second')
          FROM pgqueue.group_rates gr
         WHERE gr.queue = r.queue AND gr.group_key = r.group_key) AS group_rate_used,
       CASE WHEN q.ordered AND r.state = 'queued' THEN
           (SELECT e.id FROM pgqueue.runs e
             WHERE e.queue = r.queue AND e.group_key = r.group_key AND e.limited
               AND e.state IN ('scheduled', 'queued', 'running', 'waiting')
             ORDER BY e.id LIMIT 1) END AS first_in_group,
       c.state AS child_state, c.task AS child_task,
       -- its dependencies not finished yet (by primary key; none without `after`)
       ARRAY(SELECT d.id FROM pgqueue.runs d WHERE d.id = ANY (r.after)
               AND d.state NOT IN ('succeeded', 'failed', 'canceled') ORDER BY 1) AS waiting_for,
       CASE WHEN r.state = 'queued' THEN coalesce(h.ahead, 1000) END AS ahead, now() AS now
FROM r
JOIN q ON q.queue = r.queue
LEFT JOIN LATERAL (
    SELECT count(*) AS taken, (array_agg(h.id ORDER BY h.id))[1:10] AS holders
    FROM held h
    WHERE h.queue = r.queue AND h.group_key = r.group_key
) g ON true
LEFT JOIN pgqueue.runs c ON c.id = r.wait_run_id
LEFT JOIN heads h ON h.queue = r.queue AND h.id = r.id
ORDER BY r.id
