SELECT pgqueue.emit_event(%(event)s, %(key)s, %(payload)s::jsonb, %(delay)s) AS id
