-- Task names that live workers have registered (used to check `pgqueue enqueue TASK`).
SELECT DISTINCT unnest(tasks) AS task FROM pgqueue.workers
