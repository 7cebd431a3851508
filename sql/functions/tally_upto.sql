-- Where the tally of finished runs ends (pgqueue.tally_mark.upto). A STABLE function,
-- not a subquery: the planner evaluates it while planning, so a condition
-- `finished_at >= pgqueue.tally_upto()` is estimated as the few seconds of runs it is,
-- not as a third of the table (which, on a large history, priced the views high enough
-- to be JIT-compiled: a second per query).
CREATE OR REPLACE FUNCTION pgqueue.tally_upto() RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$ SELECT upto FROM pgqueue.tally_mark $$;
