-- pgqueue 0016: a batch's counters spread over rows (docs/flow_control.md, batches).
--
-- Until now every transaction that finished members of a batch updated the batch's one
-- row at commit, and held its lock through the commit's WAL flush: completions of two
-- workers took turns instead of sharing flushes. The counters now live in
-- pgqueue.batch_counts, one row per batch and slot (the committing backend's pid modulo
-- 64, created on first use), so concurrent committers update different rows. The batch's
-- own row (pgqueue.batch_heads, the former table) is locked only by the last commits
-- (pgqueue.batch_flush() says which) and by the settlement; pgqueue.batches becomes a
-- view that sums the slots, with the columns the table had.
ALTER TABLE pgqueue.batches RENAME TO batch_heads;

CREATE TABLE pgqueue.batch_counts (
    batch_id  bigint NOT NULL REFERENCES pgqueue.batch_heads (id) ON DELETE CASCADE,
    slot      smallint NOT NULL,
    succeeded integer NOT NULL DEFAULT 0,
    failed    integer NOT NULL DEFAULT 0,
    canceled  integer NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, slot)
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000
);

INSERT INTO pgqueue.batch_counts (batch_id, slot, succeeded, failed, canceled)
SELECT id, 0, succeeded, failed, canceled
FROM pgqueue.batch_heads
WHERE succeeded <> 0 OR failed <> 0 OR canceled <> 0;

ALTER TABLE pgqueue.batch_heads
    DROP COLUMN succeeded,
    DROP COLUMN failed,
    DROP COLUMN canceled;

-- Sealed batches whose callback is not enqueued yet: what the sweep behind the
-- settlement at commit reads (sql/settle_open_batches.sql).
CREATE INDEX batch_heads_open_idx ON pgqueue.batch_heads (id)
    WHERE completed_at IS NULL AND total IS NOT NULL;

-- A batch's members in id order (the dashboard's batch page pages through them by id):
-- runs_batch_idx is rebuilt by 0016_batch_counts.py, before this file.
