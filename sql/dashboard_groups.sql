-- The groups of one queue with live runs, busiest first: runs holding a permit (running
-- under an unexpired lease, as claim_limited() counts them) and who they are, queued,
-- scheduled and waiting runs, starts under a group rate limit. One branch per state, each on its partial index; the
-- queue's totals come along (window sums over every group, before the LIMIT), so that
-- its page reads its live runs once.
WITH live AS (
    SELECT group_key, id, run_at, lease_expires_at > now() AS holds, 'running' AS state
      FROM pgqueue.runs WHERE state = 'running' AND queue = %(queue)s
    UNION ALL
    SELECT group_key, id, run_at, false, 'queued'
      FROM pgqueue.runs WHERE state = 'queued' AND queue = %(queue)s
    UNION ALL
    SELECT group_key, id, run_at, false, 'scheduled'
      FROM pgqueue.runs WHERE state = 'scheduled' AND queue = %(queue)s
    UNION ALL
    SELECT group_key, id, run_at, false, 'waiting'
      FROM pgqueue.runs WHERE state = 'waiting' AND queue = %(queue)s
),
groups AS (
    SELECT group_key,
           count(*) FILTER (WHERE holds) AS running,
           count(*) FILTER (WHERE state = 'running') AS running_any,
           count(*) FILTER (WHERE state = 'queued') AS queued,
           count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
           count(*) FILTER (WHERE state = 'waiting') AS waiting,
           min(run_at) FILTER (WHERE state = 'queued') AS oldest_queued_at,
           (array_agg(id ORDER BY id) FILTER (WHERE holds))[1:10] AS holders
    FROM live
    GROUP BY group_key
)
SELECT group_key, running, queued, scheduled, waiting, scheduled + waiting AS deferred,
       holders,
       -- under a group rate limit: the group's starts in the last period
       (SELECT pgqueue.rate_used(r.rate_slots, r.rate_counts,
                                 now() - q.group_rate_period * interval '1 second')
          FROM pgqueue.group_rates r
          JOIN pgqueue.queues q ON q.name = r.queue AND q.group_rate_limit IS NOT NULL
         WHERE r.queue = %(queue)s AND r.group_key = groups.group_key) AS rate_used,
       sum(running_any) OVER () AS total_running,
       sum(queued) OVER () AS total_queued,
       sum(scheduled) OVER () AS total_scheduled,
       sum(waiting) OVER () AS total_waiting,
       extract(epoch FROM now() - min(oldest_queued_at) OVER ())::double precision
           AS oldest_queued_seconds
FROM groups
ORDER BY running DESC, queued DESC, group_key
LIMIT %(limit)s
