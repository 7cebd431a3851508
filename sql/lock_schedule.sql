-- One schedule's expression, locked against the schedulers while an operator changes it.
SELECT cron, tz, now() FROM pgqueue.schedules WHERE name = %(name)s FOR UPDATE
