-- Back off the group or the queue of runs just rescheduled by RetryAfter(scope="group" |
-- "queue") (docs/flow_control.md), in the transaction of complete.sql that wrote them:
-- nothing of the group (queue) starts before the run's new run_at, on any worker (the
-- claims read these: claim.sql, claim_rated.sql, claim_limited()). A longer backoff in
-- force stays. queues.group_backoff_until keeps the latest end of the queue's group
-- backoffs: while it is in the future the queue is claimed by claim_limited(), which
-- skips the groups backed off. pgqueue_config tells the workers to read that, and when
-- to claim again (queue_limits.sql, rate_open_at.sql).
WITH b AS (
    SELECT r.queue, r.group_key, r.run_at AS until, x.scope
      FROM unnest(%(ids)s::bigint[], %(scopes)s::text[]) AS x(id, scope)
      JOIN pgqueue.runs r ON r.id = x.id
     WHERE x.scope = 'queue' OR r.group_key IS NOT NULL
),
groups AS (
    INSERT INTO pgqueue.group_backoffs AS g (queue, group_key, until)
    SELECT queue, group_key, max(until) FROM b WHERE scope = 'group' GROUP BY 1, 2
    ON CONFLICT (queue, group_key) DO UPDATE SET until = greatest(g.until, EXCLUDED.until)
),
queues AS (
    INSERT INTO pgqueue.queues AS q (name, backoff_until, group_backoff_until)
    SELECT queue, max(until) FILTER (WHERE scope = 'queue'),
           max(until) FILTER (WHERE scope = 'group')
      FROM b GROUP BY 1
    ON CONFLICT (name) DO UPDATE
       SET backoff_until = greatest(q.backoff_until, EXCLUDED.backoff_until),
           group_backoff_until = greatest(q.group_backoff_until, EXCLUDED.group_backoff_until)
    RETURNING q.name
)
SELECT count(pg_notify('pgqueue_config', name)) FROM queues
