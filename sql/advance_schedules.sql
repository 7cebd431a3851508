-- Move schedules past the ticks just fired. Fenced by the next_fire_at the scheduler
-- read: a schedule that moved meanwhile is left alone (the caller then rolls back).
UPDATE pgqueue.schedules s
   SET next_fire_at = a.next_fire_at,
       last_fire_at = coalesce(a.last_fire_at, s.last_fire_at),
       last_run_id = coalesce(a.last_run_id, s.last_run_id)
  FROM unnest(%(name)s::text[], %(old_next_fire_at)s::timestamptz[],
              %(next_fire_at)s::timestamptz[], %(last_fire_at)s::timestamptz[],
              %(last_run_id)s::bigint[])
       AS a (name, old_next_fire_at, next_fire_at, last_fire_at, last_run_id)
 WHERE s.name = a.name AND s.next_fire_at = a.old_next_fire_at
RETURNING s.name
