-- The pgqueue.queue_stats view, one row per queue.
SELECT * FROM pgqueue.queue_stats ORDER BY queue
