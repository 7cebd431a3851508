-- Insert runs that carry a unique key (task.options(unique_key=...)), in order: `runs` is
-- the JSON document of pgqueue.enqueue.encoding (one array per run, position i holding
-- field encoding.FIELDS[i]: args, kwargs, group_key, idempotency_key, task, queue,
-- priority, max_attempts, timeout_seconds, run_at, delay, parent_id, unique_key,
-- unique_while, unique_for (seconds or null), replace (boolean), after (an array of run
-- ids or null), on_dependency_failure), read at the positions
-- sql/parts/enqueue_run_fields.sql reads (tests/enqueue/test_encoding.py checks both).
-- A run given as an object with those keys (the input before revision 0025) is read too.
-- Returns one row per element: its position, the run's id, and whether it was created.
--
-- Race-free across sessions: the insert is ON CONFLICT DO NOTHING on runs_unique_key_idx
-- (and runs_idempotency_key_idx), which waits for a concurrent insert of the same key to
-- commit or roll back. When it inserts nothing, the holder is looked up through the same
-- index; then
--   - a holder older than `unique_for` leaves the scope (its unique_while becomes NULL)
--     and the insert is tried again;
--   - with `replace`, the holder (locked), if still waiting for its first start, takes
--     the new arguments and due time (a holder that is not waiting, held in a scope of
--     its own, is left as it is: a skip);
--   - otherwise the holder's id is the answer, created = false.
-- A holder that left the scope between the insert and the lookup (it started, or
-- finished) means the insert is tried again.
CREATE OR REPLACE FUNCTION pgqueue.enqueue_unique(runs jsonb, batch bigint, headers jsonb,
                                                  notify boolean)
RETURNS TABLE (run_n bigint, run_id bigint, run_created boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    e jsonb;
    i bigint;
    due timestamptz;
    new_state text;
    new_id bigint;
    inserted_state text;
    holder_id bigint;
    holder_created timestamptz;
    key text;
    idem text;
    scope text;
    window_seconds double precision;
    tries integer;
BEGIN
    FOR e, i IN SELECT x.e, x.n FROM jsonb_array_elements(runs) WITH ORDINALITY AS x (e, n)
    LOOP
        IF jsonb_typeof(e) = 'object' THEN
            e := jsonb_build_array(e -> 'args', e -> 'kwargs', e -> 'group_key',
                                   e -> 'idempotency_key', e -> 'task', e -> 'queue',
                                   e -> 'priority', e -> 'max_attempts', e -> 'timeout_seconds',
                                   e -> 'run_at', e -> 'delay', e -> 'parent_id',
                                   e -> 'unique_key', e -> 'unique_while', e -> 'unique_for',
                                   e -> 'replace', e -> 'after', e -> 'on_dependency_failure');
        END IF;
        due := coalesce((e ->> 9)::timestamptz,
                        now() + coalesce((e ->> 10)::double precision, 0)
                                * interval '1 second');
        PERFORM pgqueue.check_due('run_at', due);
        new_state := CASE WHEN due > now() THEN 'scheduled' ELSE 'queued' END;
        -- the keys as Python makes them (NFC), for a call written by hand too
        key := pgqueue.nfc(e ->> 12);
        idem := pgqueue.nfc(e ->> 3);
        scope := e ->> 13;
        window_seconds := (e ->> 14)::double precision;
        tries := 0;
        LOOP
            tries := tries + 1;
            IF tries > 100 THEN
                RAISE EXCEPTION 'pgqueue: unique key % keeps changing hands; try again', key
                      USING ERRCODE = 'serialization_failure';
            END IF;
            new_id := NULL;
            INSERT INTO pgqueue.runs AS r (task, queue, state, priority, args, kwargs,
                                           max_attempts, timeout_seconds, group_key,
                                           idempotency_key, run_at, parent_id, limited,
                                           headers, unique_key, unique_while, batch_id,
                                           after, on_dependency_failure)
            VALUES (e ->> 4, e ->> 5, new_state, (e ->> 6)::smallint,
                    e -> 0, e -> 1, (e ->> 7)::integer,
                    (e ->> 8)::double precision,
                    coalesce(e ->> 2, ''), idem, due,
                    (e ->> 11)::bigint,
                    -- flagged if its queue is claimed by claim_limited()
                    -- (sql/parts/queue_flags_runs.sql)
                    EXISTS (SELECT 1 FROM pgqueue.queues q
                             WHERE q.name = e ->> 5
                               AND (q.concurrency IS NOT NULL
                                    OR q.group_concurrency IS NOT NULL
                                    OR q.group_rate_limit IS NOT NULL OR q.ordered)),
                    enqueue_unique.headers, key, CASE WHEN key IS NOT NULL THEN scope END,
                    enqueue_unique.batch,
                    -- dependencies: pgqueue.runs_enqueue_after() (the trigger) does the rest
                    CASE WHEN jsonb_typeof(e -> 16) = 'array'
                         THEN ARRAY(SELECT jsonb_array_elements_text(e -> 16)::bigint) END,
                    e ->> 17)
            ON CONFLICT DO NOTHING
            RETURNING r.id, r.state INTO new_id, inserted_state;
            IF new_id IS NOT NULL THEN
                IF inserted_state = 'queued' AND notify THEN
                    PERFORM pg_notify('pgqueue_queued', e ->> 5);
                END IF;
                run_n := i; run_id := new_id; run_created := true;
                RETURN NEXT;
                EXIT;
            END IF;
            holder_id := NULL;
            IF key IS NOT NULL THEN
                SELECT r.id, r.created_at INTO holder_id, holder_created
                FROM pgqueue.runs r
                WHERE r.unique_key = key
                  AND (r.unique_while = 'retained'
                       OR (r.unique_while = 'active'
                           AND r.state IN ('scheduled', 'queued', 'running', 'waiting'))
                       OR (r.unique_while = 'queued'
                           AND r.state IN ('scheduled', 'queued') AND r.started_at IS NULL))
                FOR NO KEY UPDATE;
            END IF;
            IF holder_id IS NULL THEN
                IF idem IS NOT NULL THEN
                    SELECT r.id INTO holder_id FROM pgqueue.runs r
                    WHERE r.idempotency_key = idem;
                    IF holder_id IS NOT NULL THEN
                        run_n := i; run_id := holder_id; run_created := false;
                        RETURN NEXT;
                        EXIT;
                    END IF;
                END IF;
                CONTINUE;  -- the holder left the scope meanwhile
            END IF;
            IF window_seconds IS NOT NULL
               AND holder_created <= now() - window_seconds * interval '1 second' THEN
                UPDATE pgqueue.runs SET unique_while = NULL WHERE id = holder_id;
                CONTINUE;
            END IF;
            IF coalesce((e ->> 15)::boolean, false) THEN
                UPDATE pgqueue.runs r
                   SET args = e -> 0, kwargs = e -> 1, run_at = due,
                       state = new_state
                 WHERE r.id = holder_id
                   AND r.state IN ('scheduled', 'queued') AND r.started_at IS NULL;
                -- Not found: the holder (locked above, so it cannot have moved) holds the
                -- key in a scope of its own (retained, or active and running) and has
                -- nothing left to replace; the key is taken, as for a skip.
                IF FOUND AND new_state = 'queued' AND notify THEN
                    PERFORM pg_notify('pgqueue_queued', e ->> 5);
                END IF;
            END IF;
            run_n := i; run_id := holder_id; run_created := false;
            RETURN NEXT;
            EXIT;
        END LOOP;
    END LOOP;
END
$$;
