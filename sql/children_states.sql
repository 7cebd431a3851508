-- The children of a ctx.map() (by id, the primary key): their states and outcomes.
SELECT id, state, result, error, task FROM pgqueue.runs WHERE id = ANY(%(ids)s::bigint[])
