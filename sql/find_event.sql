-- The first event matching a wait that began at `since`: delivered (its payload), or
-- else the next one due (when, so that the run waits until then at most).
SELECT payload, deliver_at <= now() AS delivered,
       extract(epoch FROM deliver_at - now())::float8 AS due_in, deliver_at
FROM pgqueue.events
WHERE event = %(event)s AND key = %(key)s AND deliver_at >= %(since)s
ORDER BY deliver_at, id
LIMIT 1
