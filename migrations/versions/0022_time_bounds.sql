-- Repair first, under the row locks of the rows repaired only (the scans do not block the
-- workers); the constraints come last, NOT VALID, so the table's exclusive lock, which
-- adding one takes until the revision commits, is held for a moment: 0022_time_bounds.py
-- validates them after the commit (pgqueue.migrations.online.validate), while writes go
-- on. (A constraint left NOT VALID by an interrupted validation is added again.)
UPDATE pgqueue.runs
   SET run_at = least(greatest(run_at, timestamptz '1970-01-01 00:00:00+00'),
                      timestamptz '9999-12-31 00:00:00+00'),
       error = concat_ws(E'\n', error,
                         'run_at ' || run_at::text || ' was out of range (1970-01-01 to '
                         || '9999-12-31 00:00 UTC): moved to the nearest bound by pgqueue '
                         || 'migration 0022')
 WHERE run_at < timestamptz '1970-01-01 00:00:00+00'
    OR run_at > timestamptz '9999-12-31 00:00:00+00';

UPDATE pgqueue.events
   SET deliver_at = least(greatest(deliver_at, timestamptz '1970-01-01 00:00:00+00'),
                          timestamptz '9999-12-31 00:00:00+00')
 WHERE deliver_at < timestamptz '1970-01-01 00:00:00+00'
    OR deliver_at > timestamptz '9999-12-31 00:00:00+00';

-- Keys in NFC (pgqueue.nfc()); normalize() needs a UTF8 database, and elsewhere keys are
-- left as they are.
DO $$
BEGIN
    IF current_setting('server_encoding') <> 'UTF8' THEN
        RETURN;
    END IF;
    UPDATE pgqueue.runs r
       SET idempotency_key = n.key
      FROM (SELECT DISTINCT ON (normalize(idempotency_key, NFC))
                   id, normalize(idempotency_key, NFC) AS key
              FROM pgqueue.runs
             WHERE idempotency_key IS NOT NULL AND idempotency_key IS NOT NFC NORMALIZED
             ORDER BY normalize(idempotency_key, NFC), id) n
     WHERE r.id = n.id
       AND NOT EXISTS (SELECT 1 FROM pgqueue.runs o WHERE o.idempotency_key = n.key);
    -- Unique keys are unique only in scope (the predicate of runs_unique_key_idx): a run
    -- out of scope takes its NFC key freely, one in scope unless another run in scope
    -- holds that key.
    UPDATE pgqueue.runs
       SET unique_key = normalize(unique_key, NFC)
     WHERE unique_key IS NOT NULL AND unique_key IS NOT NFC NORMALIZED
       AND NOT coalesce(unique_while = 'retained'
                        OR (unique_while = 'active'
                            AND state IN ('scheduled', 'queued', 'running', 'waiting'))
                        OR (unique_while = 'queued'
                            AND state IN ('scheduled', 'queued') AND started_at IS NULL),
                        false);
    UPDATE pgqueue.runs r
       SET unique_key = n.key
      FROM (SELECT DISTINCT ON (normalize(unique_key, NFC))
                   id, normalize(unique_key, NFC) AS key
              FROM pgqueue.runs
             WHERE unique_key IS NOT NULL AND unique_key IS NOT NFC NORMALIZED
               AND (unique_while = 'retained'
                    OR (unique_while = 'active'
                        AND state IN ('scheduled', 'queued', 'running', 'waiting'))
                    OR (unique_while = 'queued'
                        AND state IN ('scheduled', 'queued') AND started_at IS NULL))
             ORDER BY normalize(unique_key, NFC), id) n
     WHERE r.id = n.id
       AND NOT EXISTS (SELECT 1 FROM pgqueue.runs o
                        WHERE o.unique_key = n.key
                          AND (o.unique_while = 'retained'
                               OR (o.unique_while = 'active'
                                   AND o.state IN ('scheduled', 'queued', 'running',
                                                   'waiting'))
                               OR (o.unique_while = 'queued'
                                   AND o.state IN ('scheduled', 'queued')
                                   AND o.started_at IS NULL)));
    UPDATE pgqueue.runs
       SET wait_key = normalize(wait_key, NFC)
     WHERE state = 'waiting' AND wait_key IS NOT NFC NORMALIZED;
    UPDATE pgqueue.events
       SET key = normalize(key, NFC)
     WHERE key IS NOT NFC NORMALIZED;
END
$$;

ALTER TABLE pgqueue.runs
    DROP CONSTRAINT IF EXISTS runs_run_at_range,
    ADD CONSTRAINT runs_run_at_range
    CHECK (run_at BETWEEN timestamptz '1970-01-01 00:00:00+00'
                      AND timestamptz '9999-12-31 00:00:00+00') NOT VALID;
ALTER TABLE pgqueue.events
    DROP CONSTRAINT IF EXISTS events_deliver_at_range,
    ADD CONSTRAINT events_deliver_at_range
    CHECK (deliver_at BETWEEN timestamptz '1970-01-01 00:00:00+00'
                          AND timestamptz '9999-12-31 00:00:00+00') NOT VALID;
