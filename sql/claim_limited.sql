-- Claim runs of a queue with a concurrency and/or group_concurrency limit: see
-- pgqueue.claim_limited() (migration 0005) for the rules. One statement, one transaction:
-- run it in autocommit. `finishing`: lease tokens of this worker's runs whose outcome is
-- being written; their code has returned, so they hold no permit.
-- Unlike claim.sql, this claim commits synchronously. An asynchronous commit becomes
-- visible at once, while the outcome of a `finishing` run (which waits for its flush)
-- becomes visible only after that flush: for that moment the queue would show more valid
-- leases than its limit. A synchronous claim becomes visible only after its flush, which
-- covers every outcome committed before it: the two become visible at about the same time.
SELECT r.id, r.task, r.queue, r.args, r.kwargs, r.attempt, r.max_attempts,
       r.timeout_seconds, r.lease_token, r.priority, r.group_key, r.parent_id,
       extract(epoch FROM now() - r.run_at)::double precision AS pickup_seconds,
       EXISTS (SELECT 1 FROM pgqueue.steps st WHERE st.run_id = r.id) AS has_steps
FROM pgqueue.claim_limited(%(queue)s::text, %(worker_id)s::uuid, %(limit)s::integer,
                           %(lease_seconds)s::double precision,
                           %(finishing)s::uuid[]) r
