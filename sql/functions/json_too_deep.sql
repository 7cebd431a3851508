-- Whether `doc` nests arrays and objects deeper than `max_depth`: whether a container sits
-- at level max_depth (the document itself is level 0).
CREATE OR REPLACE FUNCTION pgqueue.json_too_deep(doc jsonb, max_depth integer) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
    SELECT jsonb_path_exists(
        doc,
        format('strict $.**{%s} ? (@.type() == "array" || @.type() == "object")',
               max_depth)::jsonpath)
$$;
