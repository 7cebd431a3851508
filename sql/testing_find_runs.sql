-- pgqueue.testing.assert_enqueued: the newest runs of one task, each flagged when its
-- arguments equal the expected ones (jsonb equality: key order and spacing do not matter).
SELECT id, state, args::text AS args, kwargs::text AS kwargs,
       (%(any)s::boolean OR (args = %(args)s::jsonb AND kwargs = %(kwargs)s::jsonb)) AS matches
FROM pgqueue.runs
WHERE task = %(task)s
ORDER BY id DESC
LIMIT %(limit)s
