-- Per queue and group of unfinished runs: how many run under a live lease, how many are
-- queued or deferred, when the group's newest running run started, and its starts in the
-- last period under a group rate limit.
CREATE OR REPLACE VIEW pgqueue.groups AS
SELECT r.queue,
       r.group_key,
       count(*) FILTER (WHERE r.state = 'running' AND r.lease_expires_at > now()) AS running,
       count(*) FILTER (WHERE r.state = 'queued') AS queued,
       count(*) FILTER (WHERE r.state IN ('scheduled', 'waiting')) AS deferred,
       max(r.started_at) FILTER (WHERE r.state = 'running') AS last_started_at,
       -- under a group rate limit: the group's starts in the last period
       (SELECT pgqueue.rate_used(g.rate_slots, g.rate_counts,
                                 now() - q.group_rate_period * interval '1 second')
          FROM pgqueue.group_rates g
          JOIN pgqueue.queues q ON q.name = g.queue
         WHERE g.queue = r.queue AND g.group_key = r.group_key
           AND q.group_rate_limit IS NOT NULL) AS rate_used
FROM pgqueue.runs r
WHERE r.state IN ('scheduled', 'queued', 'running', 'waiting')
GROUP BY r.queue, r.group_key;
