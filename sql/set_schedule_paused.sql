-- Pause a schedule, or resume it from the given next tick (NULL: keep it).
UPDATE pgqueue.schedules
   SET paused = %(paused)s,
       next_fire_at = coalesce(%(next_fire_at)s::timestamptz, next_fire_at),
       updated_at = now()
 WHERE name = %(name)s
