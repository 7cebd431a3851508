-- A queue's group weights as stored, with the permit limits they share out (App.set_group_weights
-- checks the new weights against them).
SELECT q.concurrency, q.group_concurrency, q.group_weights, q.default_group_weight
FROM pgqueue.queues q
WHERE q.name = %(queue)s
