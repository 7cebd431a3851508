-- Claim up to p_limit queued runs of a queue with limits: `concurrency`,
-- `group_concurrency`, rate limits, `ordered`. One call is one transaction (the caller
-- runs it in autocommit);
-- it holds the queue's row lock until it ends, so claimers of a queue take turns, and
-- each statement below takes a fresh snapshot after the lock: the counts are exact.
--
-- Permits: a run holds one while it is `running` under an unexpired lease, except the
-- runs in p_finishing (the caller's runs whose code has returned and whose outcome is
-- being written: they no longer execute); a row of pgqueue.zombie_permits (a timed-out
-- attempt whose thread still runs) holds one while its worker's heartbeat is fresh.
--
-- Rate limits: a start is a claim; the claim's time is the clock after the lock, so
-- claims of a queue are stamped in the order they take their runs. The queue's log (on
-- its row) and each group's (pgqueue.group_rates, read when the group has its turn) say
-- how many runs started in the last period (pgqueue.rate_used); a claim takes at most
-- what is left, and adds what it took (pgqueue.rate_log_add). A claim cut short by a rate
-- limit writes rate_open_at, when the next start is allowed: the worker sleeps until
-- then. Runs held back stay `queued`: no attempt is used.
--
-- Ordered (group_concurrency 1): a group's run is taken only if no earlier run of the
-- group (by id) is unfinished (runs_group_order_idx): a run waiting to retry, delayed,
-- waiting in a workflow or running under an expired lease holds its group back.
--
-- Order (docs/concurrency.md):
--   1. lower priority value first;
--   2. within a priority, groups take turns in group_key order, starting after the
--      group served last (the cursor), wrapping around; one run per group per turn;
--   3. FIFO inside a group.
-- At each priority, phase A hands out one run per group visit until the permits are gone
-- or every group with room has had a turn; phase B then gives the groups that had a turn
-- their further runs of that priority, turn after turn; then the next priority.
-- The queue's hint (hint_priority, hint_group, hint_id) says where the last claim left
-- off, so that the next one steps over the runs it already took.
--
-- Group weights (queues.group_weights not NULL; migration 0029): within a priority, the
-- turns of point 2 give way to stride scheduling. Each group has a pass (the queue's
-- group_passes, read as at least its group_vtime: a group back from idle starts level
-- with the others, with no credit saved up); the claim hands out runs lowest
-- pass first, ties by group_key, and each start advances its group's pass by 1/weight. So
-- while groups have runs waiting, their starts are proportional to their weights; a group
-- with nothing waiting (or no room) is not visited, and the others take its share. Each
-- priority's groups with runs are probed once per claim (a weighted queue has named
-- groups, not thousands); the hint is not used. Without weights, none of this runs.
CREATE OR REPLACE FUNCTION pgqueue.claim_limited(
    p_queue         text,
    p_worker        uuid,
    p_limit         integer,
    p_lease_seconds double precision,
    p_finishing     uuid[] DEFAULT '{}'
) RETURNS SETOF pgqueue.runs
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
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
    stamp    timestamptz;          -- when this claim starts its runs
    cap      jsonb := '{}';        -- group -> runs it may start, before this call's picks
    room     bigint;
    g_slots  timestamptz[];
    g_counts integer[];
    opens    timestamptz;          -- when a start held back by a rate limit is allowed
    left_    bigint;
    q_period interval;             -- the queue's rate period, the groups'
    new_slots  timestamptz[];      -- the queue's rate log after this claim
    new_counts integer[];
    g_period interval;
    weighted boolean;              -- group weights apply (see above)
    wpass    jsonb;                -- group -> its pass, with this claim's picks
    vtime    double precision;     -- the queue's virtual time after this claim's picks
BEGIN
    SELECT * INTO q FROM pgqueue.queues WHERE name = p_queue FOR UPDATE;
    IF NOT FOUND OR q.paused THEN
        RETURN;
    END IF;
    -- Backoff (RetryAfter(scope="queue")): nothing of the queue starts before it ends.
    IF q.backoff_until > now() THEN
        RETURN;
    END IF;
    stamp := clock_timestamp();
    q_period := q.rate_period * interval '1 second';
    g_period := q.group_rate_period * interval '1 second';

    -- Permits held: runs running under a valid lease, and the attempts whose outcome is
    -- written but whose code still runs in a thread of a live worker (zombie_permits).
    -- Counted only where a permit limit is set: a queue with only rate limits (or
    -- ordered, which needs group_concurrency) does not count its running runs.
    busy := '{}';
    running := 0;
    IF q.concurrency IS NOT NULL OR q.group_concurrency IS NOT NULL THEN
        SELECT coalesce(jsonb_object_agg(b.group_key, b.n), '{}'), coalesce(sum(b.n), 0)
          INTO busy, running
          FROM (SELECT h.group_key, count(*) AS n
                  FROM (SELECT r.group_key
                          FROM pgqueue.runs r
                         WHERE r.state = 'running' AND r.queue = p_queue
                           AND r.lease_expires_at > now()
                           AND r.lease_token <> ALL (p_finishing)
                        UNION ALL
                        SELECT z.group_key
                          FROM pgqueue.zombie_permits z
                          JOIN pgqueue.workers w ON w.id = z.worker_id
                         WHERE z.queue = p_queue
                           AND w.heartbeat_at > now() - z.lease_seconds * interval '1 second') h
                 GROUP BY h.group_key) b;
    END IF;
    budget := least(p_limit, coalesce(q.concurrency, 2147483647) - running);
    gc := coalesce(q.group_concurrency, 2147483647);
    IF q.rate_limit IS NOT NULL AND budget > 0 THEN
        budget := least(budget, q.rate_limit - pgqueue.rate_used(q.rate_slots, q.rate_counts,
                                                                  stamp - q_period));
        IF budget <= 0 THEN
            -- the log's oldest slot leaves the period first
            opens := (SELECT min(u.s) FROM unnest(q.rate_slots) AS u(s)
                       WHERE u.s >= stamp - q_period) + q_period;
        END IF;
    END IF;
    IF budget <= 0 THEN
        IF opens IS DISTINCT FROM q.rate_open_at THEN
            UPDATE pgqueue.queues SET rate_open_at = opens WHERE name = p_queue;
        END IF;
        RETURN;
    END IF;

    -- The hint applies for 0.1 s after the claim from the front it descends from.
    IF q.hint_id IS NOT NULL AND q.hint_since > clock_timestamp() - interval '100 ms' THEN
        hid := q.hint_id;
    END IF;
    -- Weighted: one pass, from the front (the hint is written by the turns only).
    weighted := q.group_weights IS NOT NULL;
    vtime := q.group_vtime;
    wpass := q.group_passes;
    IF weighted THEN
        hid := 0;
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
                                        -- Backoff: a queue without limits is claimed
                                        -- here while a group backoff holds (its runs
                                        -- are not flagged at enqueue); the runs of a
                                        -- group backed off are left out, so that the
                                        -- other groups' runs come in behind them.
                                        -- A scalar subquery: a probe of the primary
                                        -- key per run (NOT EXISTS hashes the table).
                                        AND (q.group_backoff_until IS NULL
                                             OR q.group_backoff_until <= stamp
                                             OR coalesce(
                                                 (SELECT b.until
                                                    FROM pgqueue.group_backoffs b
                                                   WHERE b.queue = p_queue
                                                     AND b.group_key = u.group_key),
                                                 '-infinity') <= stamp)
                                      ORDER BY u.priority, u.id LIMIT 1000));
            IF FOUND THEN
                hid := 0;
                lvl := pgqueue.claim_next_priority(p_queue, -32769, NULL, NULL, 0);
            END IF;
        END IF;
        <<by_priority>>
        WHILE lvl IS NOT NULL LOOP
            -- Group weights: stride scheduling in place of phases A and B.
            IF weighted THEN
                -- The groups with runs at this priority and room: one probe each.
                turns := '{}';
                k := NULL;
                LOOP
                    IF k IS NULL THEN
                        SELECT r.group_key INTO k FROM pgqueue.runs r
                         WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
                           AND r.priority = lvl
                         ORDER BY r.group_key, r.id LIMIT 1;
                    ELSE
                        SELECT r.group_key INTO k FROM pgqueue.runs r
                         WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
                           AND r.priority = lvl AND r.group_key > k
                         ORDER BY r.group_key, r.id LIMIT 1;
                    END IF;
                    EXIT WHEN k IS NULL;
                    IF NOT cap ? k THEN
                        room := gc - coalesce((busy ->> k)::bigint, 0);
                        IF q.group_rate_limit IS NOT NULL THEN
                            SELECT g.rate_slots, g.rate_counts INTO g_slots, g_counts
                              FROM pgqueue.group_rates g
                             WHERE g.queue = p_queue AND g.group_key = k;
                            left_ := q.group_rate_limit - pgqueue.rate_used(
                                g_slots, g_counts, stamp - g_period);
                            room := least(room, left_);
                            IF left_ <= 0 THEN
                                opens := least(opens,
                                    (SELECT min(u.s) FROM unnest(g_slots) AS u(s)
                                      WHERE u.s >= stamp - g_period) + g_period);
                            END IF;
                        END IF;
                        -- Backoff, as in phase A below.
                        IF q.group_backoff_until > stamp
                           AND EXISTS (SELECT 1 FROM pgqueue.group_backoffs b
                                        WHERE b.queue = p_queue AND b.group_key = k
                                          AND b.until > stamp) THEN
                            room := 0;
                        END IF;
                        cap := cap || jsonb_build_object(k, room);
                    END IF;
                    CONTINUE WHEN (cap ->> k)::bigint - coalesce((used ->> k)::bigint, 0) <= 0;
                    turns := turns || k;
                END LOOP;
                -- Each group's next runs in id order, the nth at pass0 + (n - 1) / weight;
                -- the lowest passes win. An ordered group (group_concurrency 1) offers its
                -- first run only if no earlier run of the group is unfinished.
                WITH g AS (
                    SELECT t.group_key, w.weight,
                           greatest(coalesce((wpass ->> t.group_key)::double precision, 0),
                                    vtime) AS pass0,
                           least(budget - cardinality(picked),
                                 (cap ->> t.group_key)::bigint
                                    - coalesce((used ->> t.group_key)::bigint, 0)) AS room
                      FROM unnest(turns) AS t(group_key)
                     CROSS JOIN LATERAL (
                           SELECT coalesce((q.group_weights ->> t.group_key)::integer,
                                           q.default_group_weight)::double precision AS weight
                           ) w
                ), c AS (
                    SELECT x.id, g.group_key, g.weight, g.pass0,
                           g.pass0 + (x.nth - 1) / g.weight AS start
                      FROM g
                     CROSS JOIN LATERAL (
                           SELECT r.id, row_number() OVER (ORDER BY r.id) AS nth
                             FROM (SELECT r.id FROM pgqueue.runs r
                                    WHERE r.state = 'queued' AND r.limited
                                      AND r.queue = p_queue AND r.priority = lvl
                                      AND r.group_key = g.group_key
                                      AND r.id <> ALL (picked)
                                    ORDER BY r.id
                                    LIMIT g.room) r) x
                     WHERE g.room > 0
                       AND (NOT q.ordered
                            OR (SELECT e.id FROM pgqueue.runs e
                                 WHERE e.queue = p_queue AND e.group_key = g.group_key
                                   AND e.limited
                                   AND e.state IN ('scheduled', 'queued', 'running', 'waiting')
                                 ORDER BY e.id LIMIT 1) >= x.id)
                     ORDER BY start, g.group_key
                     LIMIT budget - cardinality(picked)
                )
                SELECT coalesce(array_agg(c.id), '{}'),
                       wpass || coalesce((SELECT jsonb_object_agg(a.group_key,
                                                                  a.pass0 + a.n / a.weight)
                                            FROM (SELECT c2.group_key, c2.pass0, c2.weight,
                                                         count(*) AS n
                                                    FROM c c2
                                                   GROUP BY 1, 2, 3) a), '{}'),
                       greatest(vtime, max(c.start))
                  INTO more, wpass, vtime
                  FROM c;
                picked := picked || more;
                EXIT by_priority WHEN cardinality(picked) >= budget;
                IF cardinality(more) > 0 THEN
                    SELECT coalesce(jsonb_object_agg(u.group_key, u.n), '{}') INTO used
                      FROM (SELECT r.group_key, count(*) AS n FROM pgqueue.runs r
                             WHERE r.id = ANY (picked) GROUP BY r.group_key) u;
                END IF;
                lvl := pgqueue.claim_next_priority(p_queue, lvl, NULL, NULL, 0);
                CONTINUE by_priority;
            END IF;
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
                    -- What the group may start: its permits, and what its rate limit
                    -- leaves in the period (read once per call).
                    IF NOT cap ? k THEN
                        room := gc - coalesce((busy ->> k)::bigint, 0);
                        IF q.group_rate_limit IS NOT NULL THEN
                            SELECT g.rate_slots, g.rate_counts INTO g_slots, g_counts
                              FROM pgqueue.group_rates g
                             WHERE g.queue = p_queue AND g.group_key = k;
                            left_ := q.group_rate_limit - pgqueue.rate_used(
                                g_slots, g_counts, stamp - g_period);
                            room := least(room, left_);
                            IF left_ <= 0 THEN
                                opens := least(opens,
                                    (SELECT min(u.s) FROM unnest(g_slots) AS u(s)
                                      WHERE u.s >= stamp - g_period) + g_period);
                            END IF;
                        END IF;
                        -- Backoff (RetryAfter(scope="group")): a group backed off has
                        -- no room until its backoff ends. Probed (primary key) only
                        -- while the queue's latest group backoff is in the future.
                        IF q.group_backoff_until > stamp
                           AND EXISTS (SELECT 1 FROM pgqueue.group_backoffs b
                                        WHERE b.queue = p_queue AND b.group_key = k
                                          AND b.until > stamp) THEN
                            room := 0;
                        END IF;
                        cap := cap || jsonb_build_object(k, room);
                    END IF;
                    -- Within one priority a group is visited once; `used` holds the runs
                    -- picked at earlier priorities.
                    CONTINUE WHEN (cap ->> k)::bigint - coalesce((used ->> k)::bigint, 0) <= 0;
                    -- An ordered group waits for its earlier runs to finish: its first
                    -- unfinished run must be this one (a probe of runs_group_order_idx,
                    -- in its order; an EXISTS lets a generic plan scan the table).
                    IF q.ordered THEN
                        CONTINUE WHEN (SELECT e.id FROM pgqueue.runs e
                                        WHERE e.queue = p_queue AND e.group_key = k
                                          AND e.limited
                                          AND e.state IN ('scheduled', 'queued', 'running',
                                                          'waiting')
                                        ORDER BY e.id LIMIT 1) < run_id;
                    END IF;
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
                                               (cap ->> t.group_key)::bigint
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

    -- Group weights: the passes and the queue's virtual time, on the queue's row (locked
    -- already). A pass at or below the virtual time reads as it: it goes, so the map holds
    -- only the groups ahead of the others.
    IF weighted AND cardinality(picked) > 0 THEN
        UPDATE pgqueue.queues
           SET group_vtime = vtime,
               group_passes = (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}')
                                 FROM jsonb_each(wpass) e
                                WHERE e.value::double precision > vtime)
         WHERE name = p_queue;
    END IF;

    -- The rate logs take this claim's starts; rate_open_at says when the queue's next
    -- start is allowed if a rate limit is what stops it now.
    IF q.group_rate_limit IS NOT NULL AND cardinality(picked) > 0 THEN
        INSERT INTO pgqueue.group_rates AS g (queue, group_key, rate_slots, rate_counts)
        SELECT p_queue, a.group_key, l.slots, l.counts
          FROM (SELECT r.group_key, count(*)::integer AS n FROM pgqueue.runs r
                 WHERE r.id = ANY (picked) GROUP BY r.group_key) a
         CROSS JOIN LATERAL pgqueue.rate_log_add('{}'::timestamptz[], '{}'::integer[], a.n,
                                                 stamp, q.group_rate_period) l
        ON CONFLICT (queue, group_key) DO UPDATE
           SET (rate_slots, rate_counts) = (
               SELECT l.slots, l.counts
                 FROM pgqueue.rate_log_add(g.rate_slots, g.rate_counts,
                                           EXCLUDED.rate_counts[1], stamp,
                                           q.group_rate_period) l);
        -- Now and then, the groups whose starts have all left the period go.
        IF random() < 0.01 THEN
            DELETE FROM pgqueue.group_rates g
             WHERE g.queue = p_queue
               AND g.rate_slots[cardinality(g.rate_slots)] < stamp - g_period;
        END IF;
    END IF;
    new_slots := q.rate_slots;
    new_counts := q.rate_counts;
    IF q.rate_limit IS NOT NULL THEN
        IF cardinality(picked) > 0 THEN
            SELECT l.slots, l.counts INTO new_slots, new_counts
              FROM pgqueue.rate_log_add(q.rate_slots, q.rate_counts, cardinality(picked),
                                        stamp, q.rate_period) l;
        END IF;
        IF pgqueue.rate_used(new_slots, new_counts, stamp - q_period) >= q.rate_limit THEN
            -- the log's oldest slot in the period leaves it first
            opens := least(opens, (SELECT min(u.s) FROM unnest(new_slots) AS u(s)
                                    WHERE u.s >= stamp - q_period) + q_period);
        END IF;
    END IF;

    -- The next hint. Within one (priority, group) a claim takes runs in id order from
    -- where its scan started (the group's front, or the hint), so every run up to the
    -- largest id it took there has left `queued`. With one group (a queue with a
    -- `concurrency` only), that is the queue's every claim. One write of the queue's
    -- row, with its rate log.
    IF next_grp IS NOT NULL THEN
        UPDATE pgqueue.queues
           SET rr_cursor = last, hint_priority = next_lvl, hint_group = next_grp,
               hint_id = next_id,
               -- read after the hint, it keeps the hint's time; read from the group's
               -- front, it starts a new life
               hint_since = CASE WHEN hid > 0 AND next_lvl = q.hint_priority
                                      AND next_grp = q.hint_group
                                 THEN q.hint_since ELSE clock_timestamp() END,
               rate_slots = new_slots, rate_counts = new_counts, rate_open_at = opens
         WHERE name = p_queue;
    ELSIF last IS DISTINCT FROM q.rr_cursor
          OR (new_slots, new_counts, opens)
             IS DISTINCT FROM (q.rate_slots, q.rate_counts, q.rate_open_at) THEN
        UPDATE pgqueue.queues
           SET rr_cursor = last,
               rate_slots = new_slots, rate_counts = new_counts, rate_open_at = opens
         WHERE name = p_queue;
    END IF;

    RETURN QUERY
    UPDATE pgqueue.runs r
       SET state = 'running',
           attempt = r.attempt + 1,
           worker_id = p_worker,
           lease_token = gen_random_uuid(),
           lease_expires_at = now() + p_lease_seconds * interval '1 second',
           started_at = stamp
     WHERE r.id = ANY (picked) AND r.state = 'queued'
    RETURNING r.*;
END
$$;
