-- A timed-out (or canceled, or lost) attempt whose code still runs in a thread keeps its
-- permit of a limited queue: pgqueue.claim_limited() counts this row until the thread
-- returns (release_zombie_permit.sql) or the worker stops beating (migration 0008).
-- pgqueue.cancel() may have filed the row already, with what was left of the lease: the
-- worker's own lease length replaces that.
INSERT INTO pgqueue.zombie_permits (lease_token, run_id, worker_id, queue, group_key,
                                    lease_seconds)
VALUES (%(lease_token)s::uuid, %(run_id)s, %(worker_id)s, %(queue)s, %(group_key)s,
        %(lease_seconds)s)
ON CONFLICT (lease_token) DO UPDATE SET lease_seconds = excluded.lease_seconds
