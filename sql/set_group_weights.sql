-- Change a queue's group weights at run time (`pgqueue queues set --group-weight`): the
-- map (NULL: no weights) and the default weight; workers hear of it at once. The queue
-- must exist (it has the limits the weights share out).
WITH changed AS (
    UPDATE pgqueue.queues
       SET group_weights = %(group_weights)s, default_group_weight = %(default_group_weight)s,
           updated_at = now()
     WHERE name = %(queue)s
    RETURNING name
)
SELECT pg_notify('pgqueue_config', name) FROM changed
