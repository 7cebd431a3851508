-- The waiters' backstop poll: which of the runs waited on have finished, or are gone
-- (pruned, never existed), in one statement for every waiter of a process.
SELECT w.id
FROM unnest(%(ids)s::bigint[]) AS w(id)
LEFT JOIN pgqueue.runs r ON r.id = w.id
WHERE r.id IS NULL OR r.state IN ('succeeded', 'failed', 'canceled')
