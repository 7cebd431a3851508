-- A page of runs whose arguments contain %(arg)s ({states}: every state, as in the other
-- dashboard_runs_* files), newest (largest id) first, when runs_args_idx exists (`pgqueue
-- runs search-index`): the index gives the matching runs, the other filters apply in the
-- same scan, so every run read is on the page and a page is full at any depth. Read with
-- a custom plan (prepare=False): the planner weighs the filter's selectivity, and walks
-- the primary key backwards instead when most runs match.
WITH scanned AS MATERIALIZED (
    SELECT id, task, queue, state, group_key, priority, attempt, max_attempts, error,
           parent_id, run_at, created_at, started_at, finished_at, idempotency_key,
           cancel_reason, lease_expires_at, args, kwargs
    FROM pgqueue.runs
    WHERE (args || kwargs) @> ({{dashboard_arg_pattern}})
      AND state IN ({states}) AND id < %(before_id)s
      AND (%(state)s::text IS NULL OR state = %(state)s::text)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR task = %(task)s::text)
      AND (%(group)s::text IS NULL OR group_key = %(group)s::text)
    ORDER BY id DESC
    LIMIT %(limit)s
),
{{dashboard_page}}
