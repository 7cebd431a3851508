-- The fields of one run to insert, read from `e` (a column of the including statement):
-- the JSON array that pgqueue.enqueue.encoding.encode() writes, position i holding field
-- encoding.FIELDS[i] (tests/enqueue/test_encoding.py checks that the two agree). Every
-- enqueue statement reads a run through this part; a column it does not use costs
-- nothing (the planner drops it). A select list: the columns named as pgqueue.runs
-- names them, but `due` (run_at, else now() plus delay) and the uniqueness fields.
-- `after` (the run ids it waits for) is a bigint[], NULL when absent; the trigger
-- runs_enqueue_after does the rest of a dependency (pgqueue.runs_enqueue_after()).
-- pgqueue.enqueue_unique() (sql/functions/) reads the same positions in its own text.
e -> 0 AS args,
e -> 1 AS kwargs,
coalesce(e ->> 2, '') AS group_key,
e ->> 3 AS idempotency_key,
e ->> 4 AS task,
e ->> 5 AS queue,
(e ->> 6)::smallint AS priority,
(e ->> 7)::integer AS max_attempts,
(e ->> 8)::double precision AS timeout_seconds,
coalesce((e ->> 9)::timestamptz,
         now() + coalesce((e ->> 10)::double precision, 0) * interval '1 second') AS due,
(e ->> 11)::bigint AS parent_id,
e ->> 12 AS unique_key,
e ->> 13 AS unique_while,
(e ->> 14)::double precision AS unique_for,
coalesce((e ->> 15)::boolean, false) AS replace,
CASE WHEN jsonb_typeof(e -> 16) = 'array'
     THEN ARRAY(SELECT jsonb_array_elements_text(e -> 16)::bigint) END AS after,
e ->> 17 AS on_dependency_failure,
coalesce((e ->> 18)::boolean, false) AS cancel_running
