-- Schedules with a tick due, locked for this scheduler; another worker's scheduler skips
-- them (SKIP LOCKED) instead of waiting. Also returns the database's clock, the one
-- every tick is compared with.
SELECT name, cron, tz, catch_up, next_fire_at, now() AS now
FROM pgqueue.schedules
WHERE enabled AND NOT paused AND next_fire_at <= now()
ORDER BY next_fire_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
