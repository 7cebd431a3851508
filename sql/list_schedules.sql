-- Every schedule, with the state of the run its last tick enqueued.
SELECT s.name, s.cron, s.tz, s.task, s.args, s.kwargs, s.queue, s.catch_up, s.enabled,
       s.paused, s.next_fire_at, s.last_fire_at, s.last_run_id, r.state AS last_run_state,
       s.updated_at
FROM pgqueue.schedules s
LEFT JOIN pgqueue.runs r ON r.id = s.last_run_id
ORDER BY s.name
