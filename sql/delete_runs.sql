-- Delete finished runs by id (the dashboard's Delete), with their steps and errors (ON
-- DELETE CASCADE); as prune_runs.sql, a finished child whose parent has not finished is
-- kept (the parent reads its outcome). By primary key. Returns the ids deleted.
WITH doomed AS (
    SELECT r.id
    FROM pgqueue.runs r
    WHERE r.id = ANY (%(ids)s::bigint[])
      AND r.state IN ('succeeded', 'failed', 'canceled')
      AND coalesce((SELECT p.state FROM pgqueue.runs p WHERE p.id = r.parent_id),
                   'succeeded') IN ('succeeded', 'failed', 'canceled')
    FOR UPDATE
)
DELETE FROM pgqueue.runs
WHERE id = ANY (ARRAY(SELECT id FROM doomed))
RETURNING id
