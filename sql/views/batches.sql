-- One row per batch (app.batch()): its callback, its total, and its members in each
-- terminal state, the sums of its slots in pgqueue.batch_counts (migration 0016).
CREATE OR REPLACE VIEW pgqueue.batches AS
SELECT h.id,
       h.on_complete,
       h.queue,
       h.priority,
       h.max_attempts,
       h.kwargs,
       h.total,
       coalesce(c.succeeded, 0)::integer AS succeeded,
       coalesce(c.failed, 0)::integer AS failed,
       coalesce(c.canceled, 0)::integer AS canceled,
       h.callback_run_id,
       h.created_at,
       h.sealed_at,
       h.completed_at
FROM pgqueue.batch_heads h
LEFT JOIN LATERAL (
    SELECT sum(s.succeeded) AS succeeded, sum(s.failed) AS failed, sum(s.canceled) AS canceled
    FROM pgqueue.batch_counts s
    WHERE s.batch_id = h.id
) c ON true;
