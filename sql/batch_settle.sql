-- Enqueue a sealed batch's callback if every member is terminal (and none was enqueued).
SELECT pgqueue.batch_settle(%(id)s::bigint)
