-- Disable (never delete) the schedules of this app that its code no longer defines: those
-- of one of its tasks, or of a queue this worker serves. Returns the names disabled.
UPDATE pgqueue.schedules
   SET enabled = false, updated_at = now()
 WHERE enabled
   AND NOT (name = ANY(%(names)s::text[]))
   AND (task = ANY(%(tasks)s::text[]) OR queue = ANY(%(queues)s::text[]))
RETURNING name
