-- The insert of the runs of parts/enqueue_batch_input.sql's `input`, in their order
-- (ids follow the document's order: the caller maps them back by it), without its
-- ON CONFLICT and RETURNING clauses (enqueue_run.sql, enqueue_runs.sql,
-- enqueue_runs_keyed.sql). Due now: `queued`; later: `scheduled`; with a dependency
-- unfinished, `waiting` (the trigger runs_enqueue_after, pgqueue.runs_enqueue_after()).
INSERT INTO pgqueue.runs (task, queue, state, priority, args, kwargs, max_attempts,
                          timeout_seconds, group_key, idempotency_key, run_at, parent_id,
                          limited, headers, batch_id, after, on_dependency_failure)
SELECT task, queue, {{run_state_from_due}},
       priority, args, kwargs, max_attempts, timeout_seconds, group_key, idempotency_key,
       due, parent_id, queue IN (SELECT name FROM limits), %(headers)s::jsonb,
       %(batch_id)s::bigint, after, on_dependency_failure
FROM input
ORDER BY n
