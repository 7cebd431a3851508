-- Raise invalid_parameter_value (22023) if a text argument is over its limit.
CREATE OR REPLACE FUNCTION pgqueue.check_length(what text, value text, max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF octet_length(value) > max_bytes THEN
        RAISE EXCEPTION 'pgqueue: % is % bytes, over the %-byte limit', what,
                        octet_length(value), max_bytes
              USING ERRCODE = 'invalid_parameter_value',
                    HINT = 'use a shorter value (a hash of a long key, for example)';
    END IF;
END
$$;
