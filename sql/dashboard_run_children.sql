-- A run's descendants, breadth first, at most %(limit)s of them (runs_parent_idx at each
-- level): the tree of a workflow's child runs.
WITH RECURSIVE tree AS (
    SELECT c.id, c.parent_id, c.task, c.state, c.created_at, c.started_at, c.finished_at,
           1 AS depth
    FROM pgqueue.runs c
    WHERE c.parent_id = %(id)s
    UNION ALL
    SELECT c.id, c.parent_id, c.task, c.state, c.created_at, c.started_at, c.finished_at,
           t.depth + 1
    FROM tree t
    JOIN pgqueue.runs c ON c.parent_id = t.id
    WHERE t.depth < 20
)
SELECT id, parent_id, task, state, created_at, started_at, finished_at, depth
FROM tree
ORDER BY depth, id
LIMIT %(limit)s
