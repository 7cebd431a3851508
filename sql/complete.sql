-- Record the outcome of a batch of attempts this worker held. Every row is fenced by
-- its lease token and a lease that is still valid: a worker whose lease expired (and
-- whose run may have been rescued by another) changes nothing. `refund` gives the
-- attempt back (RetryAfter, durable sleeps and waits, release at shutdown).
-- A workflow that suspends becomes `scheduled` (sleep) or `waiting` (event, child run);
-- if what it waits for already happened, it goes straight back to `queued`.
-- A finished child wakes its waiting parent. Returns the runs that were written.
-- Two inputs (pgqueue.worker._completer.complete_params), either may be empty:
--   succeeded/tokens/results: plain successes, the hot path (`succeeded` below);
--   outcomes: everything else, one jsonb document (`outcome` to `general`).
WITH outcome AS (
    -- One jsonb array of objects (built by pgqueue.worker._completer.document): absent
    -- keys are NULL. `result` is a one-element array holding the JSON result, so that a
    -- result of JSON null stays jsonb 'null' (an absent result is SQL NULL).
    SELECT o.id, o.lease_token, o.state, o.result -> 0 AS result, o.error, o.error_kind,
           o.traceback, o.delay, coalesce(o.refund, false) AS refund, o.wait_event,
           o.wait_key, o.wait_since, o.wait_run_id, o.wake_at
    FROM jsonb_to_recordset(%(outcomes)s::jsonb) AS o (
        id bigint, lease_token uuid, state text, result jsonb, error text, error_kind text,
        traceback text, delay double precision, refund boolean, wait_event text,
        wait_key text, wait_since timestamptz, wait_run_id bigint, wake_at timestamptz)
),
resolved AS (
    SELECT o.*,
           CASE WHEN o.state = 'waiting' AND (
               -- by id alone: the primary key, whatever the statistics say
               (SELECT c.state FROM pgqueue.runs c WHERE c.id = o.wait_run_id)
                   IN ('succeeded', 'failed', 'canceled')
               OR EXISTS (SELECT 1 FROM pgqueue.events e
                           WHERE e.event = o.wait_event AND e.key = o.wait_key
                             AND e.deliver_at >= o.wait_since AND e.deliver_at <= now()))
           THEN 'queued' ELSE o.state END AS next_state
    FROM outcome o
),
-- Row locks first, all of them, in id order: the lease keeper (renew_leases.sql) takes
-- the same rows in the same order, so the two never wait for each other in a cycle (the
-- updates below, left to their plans, lock in whatever order their scans meet the rows).
-- The updates read their ids from here, so this runs before either of them.
locked AS (
    SELECT id FROM pgqueue.runs
     WHERE id = ANY(%(succeeded)s::bigint[] || ARRAY(SELECT id FROM outcome))
     ORDER BY id FOR NO KEY UPDATE
),
succeeded AS (
    -- Plain successes: ids, and two jsonb objects keyed by id: the lease tokens and
    -- the results that are not JSON null. A key lookup in a jsonb object is a binary
    -- search. A batch of them costs the server about a fifth less per run than rows
    -- of jsonb_to_recordset (13 columns) and the hash join below (bench/RESULTS.md).
    -- By id and token, not `lease_token = ANY(tokens)`: one claim hands
    -- its runs one token, and a search of an array grows with the batch's square.
    UPDATE pgqueue.runs r
       SET state = 'succeeded', result = coalesce(%(results)s::jsonb -> r.id::text, 'null'),
           error = NULL, finished_at = now(), wait_event = NULL, wait_key = NULL,
           wait_since = NULL, wait_run_id = NULL, worker_id = NULL, lease_token = NULL,
           lease_expires_at = NULL
     -- every locked id: one that is not a plain success has no token here, and stays
     WHERE r.id = ANY(ARRAY(SELECT id FROM locked))
       AND r.lease_token = (%(tokens)s::jsonb ->> r.id::text)::uuid
       AND r.lease_expires_at > now()
    RETURNING r.id, r.queue, r.state, r.notify_done, r.parent_id, NULL AS error,
              NULL AS error_kind, NULL AS traceback, r.attempt
),
general AS (
    UPDATE pgqueue.runs r
       SET state = o.next_state, result = o.result, error = o.error,
           attempt = r.attempt - o.refund::integer,
           -- a durable wait's end exactly (wake_at), else now() + delay; NULL: none
           run_at = CASE WHEN o.next_state IN ('scheduled', 'waiting')
               THEN coalesce(o.wake_at, now() + o.delay * interval '1 second',
                   '9999-12-31 00:00:00+00')
               WHEN o.next_state = 'queued' THEN now()
               ELSE r.run_at END,
           finished_at = CASE WHEN o.next_state IN ('succeeded', 'failed', 'canceled')
               THEN now() END,
           wait_event = o.wait_event, wait_key = o.wait_key, wait_since = o.wait_since,
           wait_run_id = o.wait_run_id, worker_id = NULL, lease_token = NULL,
           lease_expires_at = NULL
      FROM resolved o
     WHERE r.id = o.id
       -- By primary key, and no `state = 'running'` test (a matching lease token
       -- implies it: runs_lease_check): with one, the plan hashes every running run
       -- of the cluster from runs_lease_idx on each completion, and a completion's
       -- cost grows with the number of runs running (1.5x at 3,000: bench/RESULTS.md).
       AND r.id = ANY(ARRAY(SELECT id FROM locked))
       AND r.lease_token = o.lease_token
       AND r.lease_expires_at > now()
    RETURNING r.id, r.queue, r.state, r.notify_done, r.parent_id, o.error, o.error_kind,
              o.traceback, r.attempt + o.refund::integer AS attempt
),
written AS (
    SELECT * FROM succeeded UNION ALL SELECT * FROM general
),
logged AS (
    INSERT INTO pgqueue.run_errors (run_id, attempt, kind, message, traceback, worker_id)
    SELECT id, attempt, error_kind, error, traceback, %(worker_id)s::uuid
    FROM general WHERE error_kind IS NOT NULL
),
parents AS (
    UPDATE pgqueue.runs p
       SET state = 'queued', run_at = now()
      FROM written w
     WHERE w.parent_id IS NOT NULL
       AND w.state IN ('succeeded', 'failed', 'canceled')
       AND p.id = w.parent_id
       -- Parents by primary key. Left to the statistics, a plan made while few runs
       -- were waiting reads every waiting run (runs_wait_deadline_idx) per completion:
       -- the state is tested in a form that cannot match that index's predicate.
       AND p.id = ANY(ARRAY(SELECT parent_id FROM written WHERE parent_id IS NOT NULL))
       AND (p.state = 'waiting') IS TRUE
       AND p.wait_run_id = w.id
    RETURNING p.queue
)
SELECT id,
       (SELECT count(pg_notify('pgqueue_done', w.id::text))
          FROM written w
         WHERE w.notify_done AND w.state IN ('succeeded', 'failed', 'canceled'))
     + (SELECT count(pg_notify('pgqueue_queued', q.queue))
          FROM (SELECT queue FROM written WHERE state = 'queued'
                UNION SELECT queue FROM parents) q) AS notified
FROM written
