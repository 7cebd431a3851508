-- Extend the leases of every run this worker holds, in one statement, and beat the
-- worker's heartbeat. Only leases still valid are extended: a run missing from the
-- result was lost (expired and rescued, or canceled) and must stop. (id, token): one run
-- may be held twice, by a new attempt and by the thread of an earlier one.
WITH heartbeat AS (
    UPDATE pgqueue.workers SET heartbeat_at = now() WHERE id = %(worker_id)s
)
UPDATE pgqueue.runs r
   SET lease_expires_at = now() + %(lease_seconds)s * interval '1 second'
  FROM unnest(%(id)s::bigint[], %(lease_token)s::uuid[]) AS held (id, lease_token)
 WHERE r.id = held.id
   -- by primary key; a matching lease token implies `running` (see complete.sql)
   AND r.id = ANY(%(id)s::bigint[])
   AND r.lease_token = held.lease_token
   AND r.lease_expires_at > now()
RETURNING r.id, r.lease_token::text
