-- The sweep behind the settlement at commit (functions/batch_flush.sql): sealed batches
-- without a callback whose committed counts reach their total, settled (the callback
-- enqueued once: pgqueue.batch_settle() checks again under the batch's row lock). Such a
-- batch exists only when the commits that finished its last members each missed the
-- others' counts. Reads batch_heads_open_idx and each candidate's slots
-- (batch_counts_pkey). The rescuer runs it.
WITH due AS MATERIALIZED (
    SELECT h.id
    FROM pgqueue.batch_heads h
    WHERE h.completed_at IS NULL
      AND h.total IS NOT NULL
      AND h.total <= (SELECT coalesce(sum(c.succeeded + c.failed + c.canceled), 0)
                      FROM pgqueue.batch_counts c
                      WHERE c.batch_id = h.id)
    ORDER BY h.id
    LIMIT %(limit)s::integer
)
SELECT id, pgqueue.batch_settle(id) FROM due ORDER BY id
