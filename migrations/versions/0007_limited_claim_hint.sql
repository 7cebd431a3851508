-- pgqueue 0007: a limited queue's claim continues after the last one.
--
-- Every run claimed since the last VACUUM leaves a dead entry at the front of its group
-- in runs_group_claim_idx, and claim_limited() read through all of them up to three times
-- per claim (the first priority, the group's first run, the group's further runs): 161
-- index pages per claim of 50 at first, 1,343 after 80,000 runs, and server CPU per run
-- from 41 to 56 us (bench/RESULTS.md). claim.sql solved this with per-
-- worker marks; a limited queue's claims take turns under the queue's row lock, so one
-- hint per queue, kept in its row, is exact for every worker.
--
-- The hint names a (priority, group) the last claim took runs from (the first group it
-- served at the last priority it took runs of) and the largest id it took there: every
-- run of that group and priority up to that id had left `queued` when it was taken, and
-- scans of that group start after it. Runs that come back to `queued` behind it
-- (retries, woken workflows, rescued runs) or whose enqueue commits late are found by
-- the first claim that finds fewer runs after the hint than it may take, or by the next
-- claim from the front: a hint lives 0.1 s from the claim from the front that it
-- descends from (hint_since), as claim.sql's marks do.

ALTER TABLE pgqueue.queues
    ADD COLUMN hint_priority smallint,
    ADD COLUMN hint_group text,
    ADD COLUMN hint_id bigint,
    ADD COLUMN hint_since timestamptz;

-- The most urgent priority above p_after (-32769: any) with a queued, flagged run of the
-- queue, stepping over the hinted group's claimed runs. p_hid = 0 when no hint applies.
-- (A function: claim_limited() asks at the start and after each priority it finishes.)
CREATE FUNCTION pgqueue.claim_next_priority(
    p_queue text, p_after integer, p_hp smallint, p_hg text, p_hid bigint
) RETURNS smallint LANGUAGE plpgsql STABLE AS $$
DECLARE
    lvl smallint;
BEGIN
    IF p_hid = 0 OR p_hp <= p_after THEN
        RETURN (SELECT r.priority FROM pgqueue.runs r
                 WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
                   AND r.priority > p_after
                 ORDER BY r.priority LIMIT 1);
    END IF;
    lvl := (SELECT r.priority FROM pgqueue.runs r
             WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
               AND r.priority > p_after AND r.priority < p_hp
             ORDER BY r.priority LIMIT 1);
    IF lvl IS NOT NULL THEN
        RETURN lvl;
    END IF;
    -- the hint's priority: the groups before the hinted one, then from the hint on. Each
    -- probe reads runs_group_claim_idx in its order and stops at the first live entry
    -- (an EXISTS here lets a generic plan scan the table instead).
    IF (SELECT r.id FROM pgqueue.runs r
         WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
           AND r.priority = p_hp AND r.group_key < p_hg
         ORDER BY r.group_key, r.id LIMIT 1) IS NOT NULL
       OR (SELECT r.id FROM pgqueue.runs r
            WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
              AND r.priority = p_hp AND (r.group_key, r.id) > (p_hg, p_hid)
            ORDER BY r.group_key, r.id LIMIT 1) IS NOT NULL THEN
        RETURN p_hp;
    END IF;
    RETURN (SELECT r.priority FROM pgqueue.runs r
             WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
               AND r.priority > p_hp
             ORDER BY r.priority LIMIT 1);
END
$$;

CREATE OR REPLACE FUNCTION pgqueue.claim_limited(
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
    hid      bigint := 0;          -- the hint, when it applies (0: it does not)
    more     bigint[];
    next_lvl smallint;             -- the next hint: the first group served at the last
    next_grp text;                 -- priority with picks, and the largest id taken there
    next_id  bigint;
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

    -- The hint applies for 0.1 s after the claim from the front it descends from.
    IF q.hint_id IS NOT NULL AND q.hint_since > clock_timestamp() - interval '100 ms' THEN
        hid := q.hint_id;
    END IF;

    -- Two passes at most: the first from the hint, if one applies. A claim that finds
    -- fewer runs after the hint than it may take reads the queue again from its front:
    -- runs may wait behind the hint (a retry, a woken workflow, a late commit), and a
    -- worker that got fewer runs than it asked for waits for a NOTIFY or its poll.
    <<passes>>
    LOOP
        picked := '{}';
        used := '{}';
        next_grp := NULL;
        last := q.rr_cursor;
        lvl := pgqueue.claim_next_priority(p_queue, -32769, q.hint_priority, q.hint_group, hid);
        -- Runs filed without the flag: enqueued by a REPEATABLE READ transaction whose
        -- snapshot predates the queue's limits, or by a producer still on code older than
        -- 0006. They are in runs_claim_idx only. Take them in, oldest first, once no flagged
        -- run is left, or when the front of the queue is one of them: one claim in twenty
        -- looks (the front of runs_claim_idx holds the entries of runs just claimed, which
        -- a probe must step over). Late, never lost. They may sit behind the hint: this
        -- claim reads from the front.
        IF lvl IS NULL OR (random() < 0.05
                           AND coalesce((SELECT NOT r.limited FROM pgqueue.runs r
                                          WHERE r.state = 'queued' AND r.queue = p_queue
                                          ORDER BY r.priority, r.id LIMIT 1), false)) THEN
            UPDATE pgqueue.runs r SET limited = true
             WHERE r.id = ANY (ARRAY(SELECT u.id FROM pgqueue.runs u
                                      WHERE u.state = 'queued' AND u.queue = p_queue
                                        AND NOT u.limited
                                      ORDER BY u.priority, u.id LIMIT 1000));
            IF FOUND THEN
                hid := 0;
                lvl := pgqueue.claim_next_priority(p_queue, -32769, NULL, NULL, 0);
            END IF;
        END IF;
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
                    -- ordered by group, then id. Around the hinted group, two: the groups
                    -- before it, then from the hint on.
                    IF hid > 0 AND lvl = q.hint_priority
                       AND (k IS NULL OR q.hint_group > k) THEN
                        IF k IS NULL THEN
                            SELECT r.group_key, r.id INTO k, run_id FROM pgqueue.runs r
                             WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
                               AND r.priority = lvl AND r.group_key < q.hint_group
                             ORDER BY r.group_key, r.id LIMIT 1;
                        ELSE
                            SELECT r.group_key, r.id INTO k, run_id FROM pgqueue.runs r
                             WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
                               AND r.priority = lvl AND r.group_key > k
                               AND r.group_key < q.hint_group
                             ORDER BY r.group_key, r.id LIMIT 1;
                        END IF;
                        IF NOT FOUND THEN
                            SELECT r.group_key, r.id INTO k, run_id FROM pgqueue.runs r
                             WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
                               AND r.priority = lvl
                               AND (r.group_key, r.id) > (q.hint_group, hid)
                             ORDER BY r.group_key, r.id LIMIT 1;
                        END IF;
                    ELSIF k IS NULL THEN
                        SELECT r.group_key, r.id INTO k, run_id FROM pgqueue.runs r
                         WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
                           AND r.priority = lvl
                         ORDER BY r.group_key, r.id LIMIT 1;
                    ELSE
                        SELECT r.group_key, r.id INTO k, run_id FROM pgqueue.runs r
                         WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
                           AND r.priority = lvl AND r.group_key > k
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
                    IF cardinality(turns) = 1 THEN
                        next_lvl := lvl;
                        next_grp := k;
                        next_id := run_id;
                    END IF;
                    EXIT by_priority WHEN cardinality(picked) >= budget;
                END LOOP;
            END LOOP;

            -- Phase B: every group with room at this priority has had a turn and permits
            -- are left: those groups get further runs of this priority, turn after turn.
            IF cardinality(turns) > 0 THEN
                SELECT coalesce(array_agg(z.id), '{}'),
                       greatest(next_id, max(z.id) FILTER (WHERE z.group_key = next_grp))
                  INTO more, next_id
                  FROM (
                    SELECT c.id, c.group_key
                    FROM (SELECT x.id, g.group_key, g.turn, g.room,
                                 row_number() OVER (PARTITION BY g.group_key ORDER BY x.id) AS nth
                            FROM (SELECT t.group_key, t.turn,
                                         least(budget,
                                               gc - coalesce((busy ->> t.group_key)::bigint, 0)
                                                  - coalesce((used ->> t.group_key)::bigint, 0)
                                                  - 1)  -- the run of its turn
                                             AS room,
                                         CASE WHEN hid > 0 AND lvl = q.hint_priority
                                                   AND t.group_key = q.hint_group
                                              THEN hid ELSE 0 END AS after_id
                                    FROM unnest(turns) WITH ORDINALITY AS t(group_key, turn)) g
                           CROSS JOIN LATERAL (
                                 SELECT r.id
                                   FROM pgqueue.runs r
                                  WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
                                    AND r.priority = lvl AND r.group_key = g.group_key
                                    AND r.id > g.after_id
                                    AND r.id <> ALL (picked)
                                  ORDER BY r.id
                                  LIMIT g.room) x
                           WHERE g.room > 0) c
                    WHERE c.nth <= c.room
                    ORDER BY c.nth, c.turn
                    LIMIT budget - cardinality(picked)) z;
                picked := picked || more;
                EXIT by_priority WHEN cardinality(picked) >= budget;
                -- Before the next priority: every run picked so far, per group.
                SELECT coalesce(jsonb_object_agg(u.group_key, u.n), '{}') INTO used
                  FROM (SELECT r.group_key, count(*) AS n FROM pgqueue.runs r
                         WHERE r.id = ANY (picked) GROUP BY r.group_key) u;
            END IF;
            lvl := pgqueue.claim_next_priority(p_queue, lvl, q.hint_priority, q.hint_group, hid);
        END LOOP;
        EXIT passes WHEN hid = 0 OR cardinality(picked) >= budget;
        hid := 0;
    END LOOP;

    -- The next hint. Within one (priority, group) a claim takes runs in id order from
    -- where its scan started (the group's front, or the hint), so every run up to the
    -- largest id it took there has left `queued`. With one group (a queue with a
    -- `concurrency` only), that is the queue's every claim.
    IF next_grp IS NOT NULL THEN
        UPDATE pgqueue.queues
           SET rr_cursor = last, hint_priority = next_lvl, hint_group = next_grp,
               hint_id = next_id,
               -- read after the hint, it keeps the hint's time; read from the group's
               -- front, it starts a new life
               hint_since = CASE WHEN hid > 0 AND next_lvl = q.hint_priority
                                      AND next_grp = q.hint_group
                                 THEN q.hint_since ELSE clock_timestamp() END
         WHERE name = p_queue;
    ELSIF last IS DISTINCT FROM q.rr_cursor THEN
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
