-- Delete up to `limit` runs in one finished state that finished before the cutoff,
-- oldest first (then by id). Reads runs_finished_queue_idx queue by queue (a loose scan
-- of its queues, sql/parts/finished_queues.sql): the oldest `limit` candidates of each
-- queue, merged, the oldest `limit` of those kept, then each locked by its primary key
-- (the first condition lets the planner prove that the partial index applies whatever
-- the parameter). The candidates come first, each then locked through its id (a LATERAL:
-- FOR UPDATE keeps it a subquery): as `id IN (candidates)` the planner, its statistics
-- taken with few finished runs (a worker's first round on a deep queue), scanned the
-- whole of runs_finished_queue_idx for the time condition instead (0.5 to 0.9 s a round
-- in bench.compare's drains with two processes). Steps and run_errors go with them (ON
-- DELETE CASCADE). A finished child whose parent has not finished is kept: the parent
-- reads its outcome. That check is a scalar subquery, one primary-key probe per
-- candidate: as NOT EXISTS the planner may turn it into an anti- join over a scan of
-- every run (seen in bench/soak.py: 57-95 ms per batch instead of 11-35). SKIP LOCKED:
-- concurrent pruners share the work, and the conditions hold again for the locked row (a
-- run retried meanwhile is kept). With `tallied_only` (the workers' pruner), runs not
-- yet in the tally of finished runs (after pgqueue.tally_mark) wait for it, so the last
-- hour's counts hold whatever the retention; a prune asked for by hand deletes what it
-- was asked to.
WITH candidates AS MATERIALIZED (
    SELECT c.id
    FROM {{finished_queues}} q
    CROSS JOIN LATERAL (
        SELECT r.id, r.finished_at
        FROM pgqueue.runs r
        WHERE r.state IN ('succeeded', 'failed', 'canceled')
          AND r.state = %(state)s
          AND r.queue = q.queue
          AND r.finished_at < now() - %(older_than)s * interval '1 second'
          AND (NOT %(tallied_only)s OR r.finished_at < pgqueue.tally_upto())
          AND coalesce((SELECT p.state FROM pgqueue.runs p WHERE p.id = r.parent_id),
                       'succeeded') IN ('succeeded', 'failed', 'canceled')
        ORDER BY r.finished_at, r.id
        LIMIT %(limit)s
    ) c
    ORDER BY c.finished_at, c.id
    LIMIT %(limit)s
),
doomed AS (
    SELECT d.id
    FROM candidates c
    CROSS JOIN LATERAL (
        SELECT r.id, r.state, r.finished_at, r.parent_id
        FROM pgqueue.runs r
        WHERE r.id = c.id
        LIMIT 1  -- keeps the tests below out of it
        FOR UPDATE SKIP LOCKED
    ) d
    WHERE d.state IN ('succeeded', 'failed', 'canceled')
      AND d.state = %(state)s
      AND d.finished_at < now() - %(older_than)s * interval '1 second'
      AND (NOT %(tallied_only)s OR d.finished_at < pgqueue.tally_upto())
      AND coalesce((SELECT p.state FROM pgqueue.runs p WHERE p.id = d.parent_id),
                   'succeeded') IN ('succeeded', 'failed', 'canceled')
)
DELETE FROM pgqueue.runs
WHERE id = ANY (ARRAY(SELECT id FROM doomed))
