-- A queue's rate limits and ordering as stored (App.set_limits keeps what it is not given).
SELECT q.rate_limit, q.rate_period, q.group_rate_limit, q.group_rate_period, q.ordered
FROM pgqueue.queues q
WHERE q.name = %(queue)s
