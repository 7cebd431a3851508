-- Priority aging (docs/flow_control.md): in each queue of %(queues)s with a
-- priority_aging of A seconds, a queued run's priority is its base priority (the one it
-- was enqueued with, kept in base_priority once changed) less one step per A seconds it
-- has been claimable (since run_at: when it was enqueued, or became due), down to
-- -32768: greatest(-32768, base - floor((now() - run_at) / A)). Exact and idempotent:
-- runs already at that value are not written; a run that waits again (a retry) starts
-- again from its base at its new run_at. The claim is not changed: it reads `priority`
-- from runs_claim_idx as always, and this statement moves runs in that index.
-- It reads the queued runs of the aging queues only (runs_claim_idx, by queue), never
-- the history, from the back of the queue (the runs the claims reach last), at most
-- %(batch)s of them a statement, each its own transaction: a claim skips (SKIP LOCKED)
-- only the runs of one batch while it is written, and the pass skips a run a claim
-- holds. One worker at a time (a transaction-level advisory lock; the others skip).
WITH q AS (
    SELECT name, priority_aging AS aging FROM pgqueue.queues
     WHERE name = ANY (%(queues)s::text[]) AND priority_aging IS NOT NULL
       AND pg_try_advisory_xact_lock(hashtext('pgqueue.age_priorities'))
),
due AS (
    SELECT x.id, x.aged
      FROM q
     CROSS JOIN LATERAL (
        SELECT r.id, r.priority,
               greatest(-32768, coalesce(r.base_priority, r.priority)
                   - floor(extract(epoch FROM now() - r.run_at) / q.aging))::smallint AS aged
          FROM pgqueue.runs r
         WHERE r.state = 'queued' AND r.queue = q.name
         ORDER BY r.priority DESC, r.id DESC) x
     WHERE x.aged <> x.priority
     LIMIT %(batch)s
),
-- by primary key (= ANY(ARRAY(...)): a generic plan cannot turn it into a scan)
locked AS (
    SELECT r.id FROM pgqueue.runs r
     WHERE r.id = ANY (ARRAY(SELECT id FROM due)) AND r.state = 'queued'
       FOR UPDATE SKIP LOCKED
)
UPDATE pgqueue.runs r
   SET base_priority = coalesce(r.base_priority, r.priority), priority = d.aged
  FROM due d
 WHERE r.id = ANY (ARRAY(SELECT id FROM locked)) AND d.id = r.id AND r.state = 'queued'
