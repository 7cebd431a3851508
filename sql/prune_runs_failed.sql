-- Delete up to `limit` failed runs that finished before the cutoff, oldest first (then
-- by id): prune_runs.sql for failed runs, which runs_failed_idx (finished_at) holds
-- alone, read in its order, every queue at once (queue by queue, each queue without
-- failed runs would read every failed run). `state` is 'failed'. Steps and run_errors
-- go with them (ON DELETE CASCADE). A finished child whose parent has not finished is
-- kept: the parent reads its outcome. That check is a
-- scalar subquery, one primary-key probe per candidate: as NOT EXISTS the planner may
-- turn it into an anti-join over a scan of every run (seen in bench/soak.py: 57-95 ms
-- per batch instead of 11-35). SKIP LOCKED: concurrent pruners share the work. With
-- `tallied_only` (the workers' pruner), runs not yet in the tally of finished runs
-- (after pgqueue.tally_mark) wait for it, so the last hour's counts hold whatever the
-- retention; a prune asked for by hand deletes what it was asked to.
WITH doomed AS (
    SELECT r.id
    FROM pgqueue.runs r
    WHERE r.state = 'failed'
      AND r.state = %(state)s
      AND r.finished_at < now() - %(older_than)s * interval '1 second'
      AND (NOT %(tallied_only)s OR r.finished_at < pgqueue.tally_upto())
      AND coalesce((SELECT p.state FROM pgqueue.runs p WHERE p.id = r.parent_id),
                   'succeeded') IN ('succeeded', 'failed', 'canceled')
    ORDER BY r.finished_at, r.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM pgqueue.runs
WHERE id = ANY (ARRAY(SELECT id FROM doomed))
