-- pgqueue 0017: history at scale. A tally of finished runs (docs/sql.md,
-- pgqueue.finished_buckets), and pruning of completed batches.
--
-- "Finished in the last hour" was counted from the runs themselves: at 1,000 runs/s
-- that is 3.6 million index entries and heap rows per look at pgqueue.queue_stats or the
-- dashboard. Workers now fold finished runs into one row per queue, state and 5-second
-- bucket (pgqueue.finished_tally, from pgqueue.tally_mark up to a few seconds ago), and
-- pgqueue.finished_buckets adds the runs finished since then, read from the runs.
CREATE TABLE pgqueue.finished_tally (
    bucket     timestamptz NOT NULL,
    queue      text NOT NULL,
    state      text NOT NULL,
    n          bigint NOT NULL,
    picked     bigint NOT NULL,  -- runs with a started_at: the mean pickup's count
    pickup_sum double precision NOT NULL,  -- sum of started_at - run_at, in seconds
    PRIMARY KEY (bucket, queue, state)
);

-- Where the tally ends: every run that finished before `upto` is in it, none after.
CREATE TABLE pgqueue.tally_mark (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    upto timestamptz NOT NULL
) WITH (
    -- rewritten every 5 s: as pgqueue.workers, a HOT update in place, vacuumed often
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 200
);
-- An existing install's last hour is folded in by the first workers that start.
INSERT INTO pgqueue.tally_mark (upto)
VALUES (date_bin('5 seconds', now() - interval '1 hour', timestamptz '2000-01-01 UTC'));

-- Completed batches go once nothing refers to them any more: their members and their
-- callback run pruned (sql/prune_batches.sql reads them oldest first).
CREATE INDEX batch_heads_done_idx ON pgqueue.batch_heads (completed_at)
    WHERE completed_at IS NOT NULL;
