-- Store a run's progress report ({done, total, message}, plus `at`: the database's
-- clock), fenced by the attempt's lease: a stale attempt's report changes nothing.
UPDATE pgqueue.runs
   SET progress = %(progress)s::jsonb || pg_catalog.jsonb_build_object('at', now())
 WHERE id = %(id)s AND lease_token = %(lease_token)s::uuid AND lease_expires_at > now()
