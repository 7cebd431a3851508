-- Raise invalid_parameter_value (22023) if the text of `doc` is over `max_bytes` bytes:
-- the SQL side of App(max_payload_bytes), measured on jsonb's own text (which puts a
-- space after each comma and colon, where Python's JSON puts none).
CREATE OR REPLACE FUNCTION pgqueue.check_size(what text, doc jsonb, max_bytes integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    size bigint;
BEGIN
    IF doc IS NULL THEN
        RETURN;
    END IF;
    size := octet_length(doc::text);
    IF size > max_bytes THEN
        RAISE EXCEPTION 'pgqueue: % is % bytes of JSON, over the %-byte limit', what, size,
                        max_bytes
              USING ERRCODE = 'invalid_parameter_value',
                    HINT = 'store large data elsewhere and pass a reference to it';
    END IF;
END
$$;
