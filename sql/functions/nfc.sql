-- A key (idempotency, unique, group or event key) in Unicode normal form NFC, as Python
-- enqueues store it (pgqueue/_checks.py check_key): keys compare byte for byte, and the
-- same text typed composed or decomposed must be one key. Unchanged in a database whose
-- encoding is not UTF8 (normalize() needs UTF8 there).
CREATE OR REPLACE FUNCTION pgqueue.nfc(value text) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF value IS NULL OR current_setting('server_encoding') <> 'UTF8' THEN
        RETURN value;
    END IF;
    IF value IS NFC NORMALIZED THEN
        RETURN value;
    END IF;
    RETURN normalize(value, NFC);
END
$$;
