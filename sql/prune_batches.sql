-- Delete up to `limit` completed batches that nothing refers to any more: every member
-- and the callback run pruned. Oldest first (batch_heads_done_idx); each candidate costs
-- a probe of runs_batch_idx and of the primary key (scalar subqueries: as NOT EXISTS the
-- planner may make them an anti-join over every run, as in prune_runs.sql). Their counters go with them
-- (batch_counts, ON DELETE CASCADE). SKIP LOCKED: concurrent pruners share the work.
DELETE FROM pgqueue.batch_heads
WHERE id = ANY (ARRAY(
    SELECT h.id
    FROM pgqueue.batch_heads h
    WHERE h.completed_at IS NOT NULL
      AND (SELECT 1 FROM pgqueue.runs r WHERE r.batch_id = h.id LIMIT 1) IS NULL
      AND (SELECT 1 FROM pgqueue.runs c WHERE c.id = h.callback_run_id) IS NULL
    ORDER BY h.completed_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
