-- Which of the given leases (run id, lease token) this worker still holds: a
-- `pgqueue_cancel` notification is only a hint (any role that can connect may send one),
-- so the worker stops a run only when the database says the run is no longer leased to
-- it (canceled, which clears the token, or claimed again under another token). A run
-- missing from the result is no longer ours. By primary key, one statement per burst of
-- notifications.
SELECT r.id
  FROM pgqueue.runs r
  JOIN unnest(%(id)s::bigint[], %(lease_token)s::uuid[]) AS held (id, lease_token)
    ON r.id = held.id AND r.lease_token = held.lease_token
 WHERE r.id = ANY(%(id)s::bigint[])
