-- The histogram bin of a latency in seconds (pgqueue.latency_tally): 16 bins per
-- doubling from 10 us up, so the values in one bin are within 4.4% of each other; 10 us
-- and under is bin 0. An SQL function, inlined into the queries that call it (the tally
-- keeper's fold, pgqueue.queue_stats). Latencies are date_part('epoch', ...) of an
-- interval: a double, where extract() makes a numeric, several times slower to compute.
CREATE OR REPLACE FUNCTION pgqueue.latency_bin(seconds double precision) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$ SELECT floor(16 * ln(greatest(seconds, 1e-5) * 1e5) / ln(2.0::float8))::smallint $$;
