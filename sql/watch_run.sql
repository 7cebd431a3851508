-- Ask for a NOTIFY on pgqueue_done when this run finishes (only waited-on runs notify).
UPDATE pgqueue.runs SET notify_done = true
WHERE id = %(id)s AND NOT notify_done AND state NOT IN ('succeeded', 'failed', 'canceled')
