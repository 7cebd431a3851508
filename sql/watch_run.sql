-- Ask for a NOTIFY on pgqueue_done when this run finishes (only waited-on runs notify).
-- The update holds the run's row lock for a moment, and a claim that meets the lock
-- skips the run (SKIP LOCKED) and may find nothing else: a run still queued is announced
-- again at this commit, so that idle workers look again instead of at their next poll.
WITH watched AS (
    UPDATE pgqueue.runs SET notify_done = true
    WHERE id = %(id)s AND NOT notify_done
      AND state NOT IN ('succeeded', 'failed', 'canceled')
    RETURNING queue, state
)
SELECT pg_catalog.count(pg_notify('pgqueue_queued', queue)) FROM watched WHERE state = 'queued'
