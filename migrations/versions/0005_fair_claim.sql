-- pgqueue 0005: the claim of a limited queue costs O(permits), not O(groups).
--
-- 0004 walked every group with queued runs on every claim (about 24 us per group: 26 ms
-- per claim at 1,000 groups). Now groups take turns after a per-queue cursor, level by
-- level of priority, and the walk stops as soon as the permits are handed out.

-- The last group served in each queue: the next claim starts after it.
ALTER TABLE pgqueue.queues ADD COLUMN rr_cursor text;

-- runs_group_claim_idx is rebuilt, priority first: 0005_fair_claim.py, before this file.

-- The cursor replaces the per-group "last served" rows, which cost a write per group per
-- claim. The view now says when a group's newest running run started.
DROP VIEW pgqueue.groups;
DROP TABLE pgqueue.queue_groups;
CREATE VIEW pgqueue.groups AS
SELECT r.queue,
       r.group_key,
       count(*) FILTER (WHERE r.state = 'running' AND r.lease_expires_at > now()) AS running,
       count(*) FILTER (WHERE r.state = 'queued') AS queued,
       count(*) FILTER (WHERE r.state IN ('scheduled', 'waiting')) AS deferred,
       max(r.started_at) FILTER (WHERE r.state = 'running') AS last_started_at
FROM pgqueue.runs r
WHERE r.state IN ('scheduled', 'queued', 'running', 'waiting')
GROUP BY r.queue, r.group_key;

-- Claim up to p_limit queued runs of a queue with `concurrency` and/or
-- `group_concurrency`. One call is one transaction (the caller runs it in autocommit);
-- it holds the queue's row lock until it ends, so claimers of a queue take turns, and
-- each statement below takes a fresh snapshot after the lock: the counts are exact.
--
-- Permits: a run holds one while it is `running` under an unexpired lease, except the
-- runs in p_finishing (the caller's runs whose code has returned and whose outcome is
-- being written: they no longer execute).
--
-- Order (docs/concurrency.md):
--   1. lower priority value first;
--   2. within a priority, groups take turns in group_key order, starting after the
--      group served last (the cursor), wrapping around; one run per group per turn;
--   3. FIFO inside a group.
-- At each priority, phase A hands out one run per group visit until the permits are gone
-- or every group with room has had a turn; phase B then gives the groups that had a turn
-- their further runs of that priority, turn after turn; then the next priority.
CREATE FUNCTION pgqueue.claim_limited(
    p_queue         text,
    p_worker        uuid,
    p_limit         integer,
    p_lease_seconds double precision,
    p_finishing     uuid[] DEFAULT '{}'
) RETURNS SETOF pgqueue.runs
LANGUAGE plpgsql AS $$
DECLARE
    q        pgqueue.queues;
    busy     jsonb;                -- group -> runs holding a permit
    used     jsonb := '{}';        -- group -> runs picked by this call
    running  bigint;
    budget   bigint;
    gc       bigint;
    picked   bigint[] := '{}';
    turns    text[];               -- groups that had a turn at this priority, in order
    lvl      smallint;
    seg      integer;
    k        text;
    run_id   bigint;
    last     text;
BEGIN
    SELECT * INTO q FROM pgqueue.queues WHERE name = p_queue FOR UPDATE;
    IF NOT FOUND OR q.paused THEN
        RETURN;
    END IF;

    SELECT coalesce(jsonb_object_agg(b.group_key, b.n), '{}'), coalesce(sum(b.n), 0)
      INTO busy, running
      FROM (SELECT r.group_key, count(*) AS n
              FROM pgqueue.runs r
             WHERE r.state = 'running' AND r.queue = p_queue AND r.lease_expires_at > now()
               AND r.lease_token <> ALL (p_finishing)
             GROUP BY r.group_key) b;
    budget := least(p_limit, coalesce(q.concurrency, 2147483647) - running);
    gc := coalesce(q.group_concurrency, 2147483647);
    IF budget <= 0 THEN
        RETURN;
    END IF;

    last := q.rr_cursor;
    lvl := (SELECT r.priority FROM pgqueue.runs r
             WHERE r.state = 'queued' AND r.queue = p_queue
             ORDER BY r.priority LIMIT 1);
    <<by_priority>>
    WHILE lvl IS NOT NULL LOOP
        -- Phase A. Segment 0: the groups after the cursor; segment 1: the first group up
        -- to and including the cursor.
        turns := '{}';
        FOR seg IN 0..1 LOOP
            CONTINUE WHEN seg = 1 AND q.rr_cursor IS NULL;
            k := CASE WHEN seg = 0 THEN q.rr_cursor END;
            LOOP
                -- One probe finds the next group and its first run: the index is
                -- ordered by group, then id.
                IF k IS NULL THEN
                    SELECT r.group_key, r.id INTO k, run_id FROM pgqueue.runs r
                     WHERE r.state = 'queued' AND r.queue = p_queue AND r.priority = lvl
                     ORDER BY r.group_key, r.id LIMIT 1;
                ELSE
                    SELECT r.group_key, r.id INTO k, run_id FROM pgqueue.runs r
                     WHERE r.state = 'queued' AND r.queue = p_queue AND r.priority = lvl
                       AND r.group_key > k
                     ORDER BY r.group_key, r.id LIMIT 1;
                END IF;
                EXIT WHEN k IS NULL OR (seg = 1 AND k > q.rr_cursor);
                -- Within one priority a group is visited once; `used` holds the runs
                -- picked at earlier priorities.
                CONTINUE WHEN gc - coalesce((busy ->> k)::bigint, 0)
                                 - coalesce((used ->> k)::bigint, 0) <= 0;
                picked := picked || run_id;
                turns := turns || k;
                last := k;
                EXIT by_priority WHEN cardinality(picked) >= budget;
            END LOOP;
        END LOOP;

        -- Phase B: every group with room at this priority has had a turn and permits
        -- are left: those groups get further runs of this priority, turn after turn.
        IF cardinality(turns) > 0 THEN
            picked := picked || ARRAY(
                SELECT c.id
                FROM (SELECT x.id, g.turn, g.room,
                             row_number() OVER (PARTITION BY g.group_key ORDER BY x.id) AS nth
                        FROM (SELECT t.group_key, t.turn,
                                     least(budget,
                                           gc - coalesce((busy ->> t.group_key)::bigint, 0)
                                              - coalesce((used ->> t.group_key)::bigint, 0)
                                              - 1)  -- the run of its turn
                                         AS room
                                FROM unnest(turns) WITH ORDINALITY AS t(group_key, turn)) g
                       CROSS JOIN LATERAL (
                             SELECT r.id
                               FROM pgqueue.runs r
                              WHERE r.state = 'queued' AND r.queue = p_queue
                                AND r.priority = lvl AND r.group_key = g.group_key
                                AND r.id <> ALL (picked)
                              ORDER BY r.id
                              LIMIT g.room) x
                       WHERE g.room > 0) c
                WHERE c.nth <= c.room
                ORDER BY c.nth, c.turn
                LIMIT budget - cardinality(picked));
            EXIT by_priority WHEN cardinality(picked) >= budget;
            -- Before the next priority: every run picked so far, per group.
            SELECT coalesce(jsonb_object_agg(u.group_key, u.n), '{}') INTO used
              FROM (SELECT r.group_key, count(*) AS n FROM pgqueue.runs r
                     WHERE r.id = ANY (picked) GROUP BY r.group_key) u;
        END IF;
        lvl := (SELECT r.priority FROM pgqueue.runs r
                 WHERE r.state = 'queued' AND r.queue = p_queue AND r.priority > lvl
                 ORDER BY r.priority LIMIT 1);
    END LOOP;

    IF last IS DISTINCT FROM q.rr_cursor THEN
        UPDATE pgqueue.queues SET rr_cursor = last WHERE name = p_queue;
    END IF;

    RETURN QUERY
    UPDATE pgqueue.runs r
       SET state = 'running',
           attempt = r.attempt + 1,
           worker_id = p_worker,
           lease_token = gen_random_uuid(),
           lease_expires_at = now() + p_lease_seconds * interval '1 second',
           started_at = now()
     WHERE r.id = ANY (picked) AND r.state = 'queued'
    RETURNING r.*;
END
$$;
