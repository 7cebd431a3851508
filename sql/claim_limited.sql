-- Claim runs of a queue with a concurrency and/or group_concurrency limit: see
-- pgqueue.claim_limited() (migrations 0005 to 0007) for the rules. One statement, one
-- transaction: run it in autocommit. `finishing`: lease tokens of this worker's runs
-- whose outcome is being written; their code has returned, so they hold no permit.
-- The worker passes no `finishing` runs: a run holds its permit until its outcome
-- commits, so the queue never shows more valid leases than its limit. Unlike claim.sql,
-- this claim commits synchronously: the async gain was measured for claim.sql only.
SELECT r.id, r.task, r.queue, r.args, r.kwargs, r.attempt, r.max_attempts,
       r.timeout_seconds, r.lease_token::text AS lease_token, r.priority, r.group_key,
       r.parent_id,
       extract(epoch FROM now() - r.run_at)::double precision AS pickup_seconds,
       EXISTS (SELECT 1 FROM pgqueue.steps st WHERE st.run_id = r.id) AS has_steps,
       r.headers
FROM pgqueue.claim_limited(%(queue)s::text, %(worker_id)s::uuid, %(limit)s::integer,
                           %(lease_seconds)s::double precision,
                           %(finishing)s::uuid[]) r
