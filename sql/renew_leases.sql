-- Extend the leases of every run this worker holds, in one statement, and beat the
-- worker's heartbeat. Only leases still valid are extended: a run missing from the
-- result was lost (expired and rescued, or canceled) and must stop. (id, token): one run
-- may be held twice, by a new attempt and by the thread of an earlier one.
--
-- With the loop's list of the attempts whose code still runs here (`running`; NULL when
-- the loop did not answer), the permits this worker filed for any other attempt are
-- stale and go: pgqueue.cancel() files the permit of every attempt it cancels, including
-- one whose code had just ended. A row under a second old stays for the next round (it
-- may be an attempt claimed after the list was taken).
WITH heartbeat AS (
    UPDATE pgqueue.workers SET heartbeat_at = now() WHERE id = %(worker_id)s
),
swept AS (
    DELETE FROM pgqueue.zombie_permits z
     WHERE %(running)s::uuid[] IS NOT NULL
       AND z.worker_id = %(worker_id)s
       AND z.created_at < now() - interval '1 second'
       AND z.lease_token <> ALL(%(running)s::uuid[])
),
-- Row locks first, all of them, in id order: the completer (complete.sql) takes the same
-- rows in the same order, so the two never wait for each other in a cycle. The update
-- reads its ids from here, so this runs before it.
locked AS (
    SELECT id FROM pgqueue.runs WHERE id = ANY(%(id)s::bigint[])
     ORDER BY id FOR NO KEY UPDATE
)
UPDATE pgqueue.runs r
   SET lease_expires_at = now() + %(lease_seconds)s * interval '1 second'
  FROM unnest(%(id)s::bigint[], %(lease_token)s::uuid[]) AS held (id, lease_token)
 WHERE r.id = held.id
   -- by primary key; a matching lease token implies `running` (see complete.sql)
   AND r.id = ANY(ARRAY(SELECT id FROM locked))
   AND r.lease_token = held.lease_token
   -- Valid once every row is locked, not only when the statement began (now()): a
   -- renewal that waited for a row past its expiry must not revive a lease that a claim
   -- may already have counted as free (tests/sql/test_renewal_fence.py). The time is
   -- read from `locked`'s rows, which come out only as each one is locked.
   AND r.lease_expires_at > (SELECT max(clock_timestamp()) FROM locked)
RETURNING r.id, r.lease_token::text
