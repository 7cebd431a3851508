-- Seal a batch at the end of its block, in the transaction that enqueued its members:
-- their number is its total (runs_batch_idx). Then batch_settle.sql (an empty batch is
-- complete at once).
UPDATE pgqueue.batch_heads
   SET total = (SELECT count(*) FROM pgqueue.runs WHERE batch_id = %(id)s::bigint),
       sealed_at = now()
 WHERE id = %(id)s::bigint
RETURNING total
