-- The names the dashboard's queue and task pickers offer: the queues table, the queues
-- and tasks of the totals kept by the tally, and the tasks live workers registered
-- (all small tables; never the runs).
SELECT 'queue' AS kind, name FROM pgqueue.queues
UNION SELECT 'queue', queue FROM pgqueue.finished_totals
UNION SELECT 'task', unnest(tasks) FROM pgqueue.workers
ORDER BY 1, 2
LIMIT 2000
