-- The histogram bin of a latency in seconds (pgqueue.latency_tally): 16 bins per
-- doubling from 10 us up, so the values in one bin are within 4.4% of each other; 10 us
-- and under is bin 0. An SQL function, inlined into the queries that call it (the tally
-- keeper's fold, pgqueue.queue_stats). Latencies are date_part('epoch', ...) of an
-- interval: a double, where extract() makes a numeric, several times slower to compute.
--
-- No SET search_path, unlike every other pgqueue function: a SET clause stops the
-- planner from inlining it, and a call then costs about 2.3 us more (ten times the
-- inlined expression; twice per finished run in the fold). Instead every name in the
-- body is qualified (functions, operators, types), so it means the same whatever the
-- caller's search_path (tests/e2e/test_search_path.py checks both).
CREATE OR REPLACE FUNCTION pgqueue.latency_bin(seconds double precision) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.floor(
               16::pg_catalog.float8
               OPERATOR(pg_catalog.*) pg_catalog.ln(
                   GREATEST(seconds, 1e-5::pg_catalog.float8)
                   OPERATOR(pg_catalog.*) 1e5::pg_catalog.float8)
               OPERATOR(pg_catalog./) pg_catalog.ln(2::pg_catalog.float8)
           )::pg_catalog.int2
$$;
