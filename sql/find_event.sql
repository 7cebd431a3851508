-- The first delivered event matching a wait that began at `since`.
SELECT payload
FROM pgqueue.events
WHERE event = %(event)s AND key = %(key)s AND deliver_at >= %(since)s AND deliver_at <= now()
ORDER BY deliver_at, id
LIMIT 1
