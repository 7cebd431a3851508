-- Claim runs of a queue with a concurrency and/or group_concurrency limit. Runs inside
-- a transaction that holds the queue's row lock (lock_queue), so claimers of this queue
-- take turns and the counts below are exact. Only valid leases count: a dead worker's
-- permits come back when its leases expire. Runs that sleep, wait or back off are not
-- `running` and hold no permit.
--
-- Order: lower priority first; then each group's first run before any group's second
-- (round-robin within one claim); then the group served least recently; then FIFO.
WITH RECURSIVE config AS (
    SELECT coalesce(concurrency, 2147483647) AS concurrency,
           coalesce(group_concurrency, 2147483647) AS group_concurrency,
           paused
    FROM pgqueue.queues
    WHERE name = %(queue)s
),
running AS (
    SELECT group_key, count(*) AS n
    FROM pgqueue.runs
    WHERE state = 'running' AND queue = %(queue)s AND lease_expires_at > now()
    GROUP BY group_key
),
budget AS (
    SELECT CASE WHEN c.paused THEN 0
                ELSE greatest(0, least(%(limit)s,
                                       c.concurrency - coalesce((SELECT sum(n) FROM running), 0)))
           END AS n
    FROM config c
),
-- Loose index scan over runs_group_claim_idx: one probe per group with queued runs.
groups (group_key) AS (
    (SELECT group_key FROM pgqueue.runs
      WHERE state = 'queued' AND queue = %(queue)s
      ORDER BY group_key LIMIT 1)
    UNION ALL
    SELECT (SELECT r.group_key FROM pgqueue.runs r
             WHERE r.state = 'queued' AND r.queue = %(queue)s AND r.group_key > g.group_key
             ORDER BY r.group_key LIMIT 1)
    FROM groups g
    WHERE g.group_key IS NOT NULL
),
open_groups AS (
    SELECT g.group_key,
           least((SELECT n FROM budget),
                 (SELECT group_concurrency FROM config) - coalesce(r.n, 0)) AS room,
           s.last_claimed_at
    FROM groups g
    LEFT JOIN running r ON r.group_key = g.group_key
    LEFT JOIN pgqueue.queue_groups s ON s.queue = %(queue)s AND s.group_key = g.group_key
    WHERE g.group_key IS NOT NULL
),
candidates AS (
    SELECT c.id, c.priority, g.last_claimed_at,
           row_number() OVER (PARTITION BY g.group_key ORDER BY c.priority, c.id) AS nth
    FROM open_groups g
    CROSS JOIN LATERAL (
        SELECT r.id, r.priority
        FROM pgqueue.runs r
        WHERE r.state = 'queued' AND r.queue = %(queue)s AND r.group_key = g.group_key
        ORDER BY r.priority, r.id
        LIMIT g.room
    ) c
    WHERE g.room > 0
),
picked AS (
    SELECT id
    FROM candidates
    ORDER BY priority, nth, last_claimed_at NULLS FIRST, id
    LIMIT (SELECT n FROM budget)
),
claimed AS (
    UPDATE pgqueue.runs r
       SET state = 'running',
           attempt = r.attempt + 1,
           worker_id = %(worker_id)s,
           lease_token = gen_random_uuid(),
           lease_expires_at = now() + %(lease_seconds)s * interval '1 second',
           started_at = now()
     -- = ANY(ARRAY(...)): the planner cannot know how few runs `picked` holds, and
     -- would otherwise hash-join against a scan of every queued run.
     WHERE r.id = ANY(ARRAY(SELECT id FROM picked)) AND r.state = 'queued'
    RETURNING r.id, r.task, r.queue, r.args, r.kwargs, r.attempt, r.max_attempts,
              r.timeout_seconds, r.lease_token, r.priority, r.group_key, r.parent_id,
              extract(epoch FROM now() - r.run_at)::double precision AS pickup_seconds,
              -- a workflow replaying after a wait or a retry has steps to load; a fresh one
              -- does not, and then a step costs exactly one round trip
              EXISTS (SELECT 1 FROM pgqueue.steps st WHERE st.run_id = r.id) AS has_steps
),
served AS (
    INSERT INTO pgqueue.queue_groups AS s (queue, group_key, last_claimed_at)
    SELECT %(queue)s, g.group_key, clock_timestamp()
    FROM (SELECT DISTINCT group_key FROM claimed) g
    ON CONFLICT (queue, group_key) DO UPDATE SET last_claimed_at = EXCLUDED.last_claimed_at
)
SELECT * FROM claimed
