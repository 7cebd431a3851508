-- Write the schedules defined in code (a worker does this when it starts). A schedule
-- keeps its next_fire_at unless it is new, its cron or zone changed, or it was disabled:
-- then it starts at the next tick after now (computed by the caller). Rows that are
-- already up to date are not rewritten. Returns the names written.
INSERT INTO pgqueue.schedules AS s (name, cron, tz, task, args, kwargs, queue, priority,
                                    max_attempts, timeout_seconds, group_key, catch_up,
                                    next_fire_at)
SELECT *
FROM unnest(
    %(name)s::text[], %(cron)s::text[], %(tz)s::text[], %(task)s::text[],
    %(args)s::text[]::jsonb[], %(kwargs)s::text[]::jsonb[], %(queue)s::text[],
    %(priority)s::smallint[], %(max_attempts)s::integer[],
    %(timeout_seconds)s::double precision[], %(group_key)s::text[], %(catch_up)s::boolean[],
    %(next_fire_at)s::timestamptz[]
)
ON CONFLICT (name) DO UPDATE
   SET cron = excluded.cron, tz = excluded.tz, task = excluded.task, args = excluded.args,
       kwargs = excluded.kwargs, queue = excluded.queue, priority = excluded.priority,
       max_attempts = excluded.max_attempts, timeout_seconds = excluded.timeout_seconds,
       group_key = excluded.group_key, catch_up = excluded.catch_up, enabled = true,
       next_fire_at = CASE WHEN s.cron <> excluded.cron OR s.tz <> excluded.tz OR NOT s.enabled
                           THEN excluded.next_fire_at ELSE s.next_fire_at END,
       updated_at = now()
 WHERE (s.cron, s.tz, s.task, s.args, s.kwargs, s.queue, s.priority, s.max_attempts,
        s.timeout_seconds, s.group_key, s.catch_up, s.enabled)
       IS DISTINCT FROM
       (excluded.cron, excluded.tz, excluded.task, excluded.args, excluded.kwargs,
        excluded.queue, excluded.priority, excluded.max_attempts, excluded.timeout_seconds,
        excluded.group_key, excluded.catch_up, true)
RETURNING s.name
