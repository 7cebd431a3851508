-- pgqueue 0006: runs_group_claim_idx holds only the queued runs of queues with limits.
--
-- It was the third index every enqueued run entered, and only claim_limited() reads it:
-- bulk enqueue runs 18% faster without it (bench/RESULTS.md). A run now carries
-- `limited`, true when its queue had limits as its enqueue saw them, kept in step by a
-- trigger when a queue's limits come or go.

ALTER TABLE pgqueue.runs ADD COLUMN limited boolean NOT NULL DEFAULT false;

UPDATE pgqueue.runs r
   SET limited = true
  FROM pgqueue.queues q
 WHERE q.name = r.queue
   AND (q.concurrency IS NOT NULL OR q.group_concurrency IS NOT NULL)
   AND r.state IN ('scheduled', 'queued', 'running', 'waiting');

DROP INDEX pgqueue.runs_group_claim_idx;
CREATE INDEX runs_group_claim_idx ON pgqueue.runs (queue, priority, group_key, id)
    WHERE state = 'queued' AND limited;

-- A queue gains or loses its limits: re-flag its unfinished runs. The lock waits out the
-- writers of runs in flight (an enqueue among them read the queue's old limits) and holds
-- new ones back until this transaction commits; a statement held back takes its snapshot
-- after the lock, so it reads the new limits. SHARE ROW EXCLUSIVE, not SHARE: two changes
-- at once must take turns (each holding SHARE, their UPDATEs would deadlock). If a long
-- transaction keeps the lock from us, re-flag without it: claim_limited() takes in what
-- a late enqueue files wrongly.
CREATE FUNCTION pgqueue.queue_limits_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    now_limited boolean := NEW.concurrency IS NOT NULL OR NEW.group_concurrency IS NOT NULL;
    was_limited boolean := false;
    old_timeout text := current_setting('lock_timeout');
BEGIN
    IF TG_OP = 'UPDATE' THEN
        was_limited := OLD.concurrency IS NOT NULL OR OLD.group_concurrency IS NOT NULL;
    END IF;
    IF was_limited = now_limited THEN
        RETURN NULL;
    END IF;
    BEGIN
        PERFORM set_config('lock_timeout', '500ms', true);
        LOCK TABLE pgqueue.runs IN SHARE ROW EXCLUSIVE MODE;
    EXCEPTION WHEN lock_not_available THEN
        RAISE NOTICE 'pgqueue: queue %: runs is busy; its runs are re-flagged without the lock',
            NEW.name;
    END;
    PERFORM set_config('lock_timeout', old_timeout, true);
    UPDATE pgqueue.runs r
       SET limited = now_limited
     WHERE r.queue = NEW.name
       AND r.state IN ('scheduled', 'queued', 'running', 'waiting')
       AND r.limited <> now_limited;
    RETURN NULL;
END
$$;

CREATE TRIGGER queues_limits_changed
    AFTER INSERT OR UPDATE OF concurrency, group_concurrency ON pgqueue.queues
    FOR EACH ROW EXECUTE FUNCTION pgqueue.queue_limits_changed();

-- pgqueue.enqueue: the run is flagged from its queue's limits.
CREATE OR REPLACE FUNCTION pgqueue.enqueue(
    task            text,
    args            jsonb DEFAULT '[]',
    kwargs          jsonb DEFAULT '{}',
    queue           text DEFAULT 'default',
    priority        integer DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer DEFAULT 3,
    idempotency_key text DEFAULT NULL,
    group_key       text DEFAULT NULL,
    timeout_seconds double precision DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    new_state text := CASE WHEN run_at IS NOT NULL AND run_at > now()
                           THEN 'scheduled' ELSE 'queued' END;
BEGIN
    INSERT INTO pgqueue.runs AS r (task, queue, state, priority, args, kwargs, max_attempts,
                                   timeout_seconds, group_key, idempotency_key, run_at,
                                   limited)
    VALUES (enqueue.task, enqueue.queue, new_state, enqueue.priority, enqueue.args,
            enqueue.kwargs, enqueue.max_attempts, enqueue.timeout_seconds,
            coalesce(enqueue.group_key, ''), enqueue.idempotency_key,
            coalesce(enqueue.run_at, now()),
            EXISTS (SELECT 1 FROM pgqueue.queues q
                     WHERE q.name = enqueue.queue
                       AND (q.concurrency IS NOT NULL OR q.group_concurrency IS NOT NULL)))
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING r.id INTO new_id;
    IF new_id IS NULL THEN
        SELECT r.id INTO new_id FROM pgqueue.runs r
        WHERE r.idempotency_key = enqueue.idempotency_key;
        RETURN new_id;
    END IF;
    IF new_state = 'queued' THEN
        PERFORM pg_notify('pgqueue_queued', enqueue.queue);
    END IF;
    RETURN new_id;
END
$$;

-- claim_limited: reads only flagged runs (the index above), and takes in unflagged
-- ones (see inside).
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
             WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
             ORDER BY r.priority LIMIT 1);
    -- Runs filed without the flag: enqueued by a REPEATABLE READ transaction whose
    -- snapshot predates the queue's limits, or by a producer still on code older than
    -- 0006. They are in runs_claim_idx only. Take them in, oldest first, once no flagged
    -- run is left, or when the front of the queue is one of them: one claim in twenty
    -- looks (the front of runs_claim_idx holds the entries of runs just claimed, which
    -- a probe must step over). Late, never lost.
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
            lvl := (SELECT r.priority FROM pgqueue.runs r
                     WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
                     ORDER BY r.priority LIMIT 1);
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
                -- ordered by group, then id.
                IF k IS NULL THEN
                    SELECT r.group_key, r.id INTO k, run_id FROM pgqueue.runs r
                     WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue AND r.priority = lvl
                     ORDER BY r.group_key, r.id LIMIT 1;
                ELSE
                    SELECT r.group_key, r.id INTO k, run_id FROM pgqueue.runs r
                     WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue AND r.priority = lvl
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
                              WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
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
                 WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue AND r.priority > lvl
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
