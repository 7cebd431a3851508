-- Delete up to `limit` events created before the cutoff, oldest first
-- (events_created_idx).
WITH doomed AS (
    SELECT id
    FROM pgqueue.events
    WHERE created_at < now() - %(older_than)s * interval '1 second'
    ORDER BY created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM pgqueue.events
WHERE id = ANY (ARRAY(SELECT id FROM doomed))
