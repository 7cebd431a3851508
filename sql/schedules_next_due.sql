-- Seconds until the earliest tick of any active schedule (NULL: none), on the database
-- clock.
SELECT extract(epoch FROM min(next_fire_at) - now())::double precision
FROM pgqueue.schedules
WHERE enabled AND NOT paused
