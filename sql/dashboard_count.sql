-- How many runs in {states} (psycopg.sql literals) match a list's filter, counted up to
-- %(cap)s. Run unprepared, so that its plan is made for the values given: the filters
-- left NULL fold away and the state's partial index (or one keyed by the task:
-- runs_live_task_idx, runs_finished_task_idx; for finished runs by the queue) is read; the dashboard runs it only for a filter such an index
-- answers and whose estimate (dashboard_estimate.sql) is at most the cap.
SELECT count(*) AS n
FROM (SELECT 1
      FROM pgqueue.runs r
      WHERE r.state IN ({states})
        AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
        AND (%(task)s::text IS NULL OR r.task = %(task)s::text)
        AND (%(group)s::text IS NULL OR r.group_key = %(group)s::text)
      LIMIT %(cap)s) x
