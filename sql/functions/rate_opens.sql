-- When a rate log lets a start happen again, for a limit of `lim` starts per `period`
-- seconds, as of `at`: NULL if it has room now, else when its oldest slot in the period
-- leaves it.
CREATE OR REPLACE FUNCTION pgqueue.rate_opens(
    slots timestamptz[], counts integer[], lim integer, period double precision,
    at timestamptz
) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
    SELECT CASE WHEN pgqueue.rate_used(slots, counts, at - period * interval '1 second') >= lim
                THEN (SELECT min(u.s) FROM unnest(slots) AS u(s)
                       WHERE u.s >= at - period * interval '1 second')
                     + period * interval '1 second' END
$$;
