-- Raise invalid_parameter_value (22023) if `doc` nests deeper than 256 levels.
CREATE OR REPLACE FUNCTION pgqueue.check_depth(what text, doc jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF pgqueue.json_too_deep(doc, 256) THEN
        RAISE EXCEPTION 'pgqueue: %: nested deeper than 256 levels of arrays and objects', what
              USING ERRCODE = 'invalid_parameter_value', HINT = 'flatten them';
    END IF;
END
$$;
