-- Starts a rate log (pgqueue.queues' or pgqueue.group_rates' rate_slots, rate_counts)
-- holds at or after `since`: the current use of a rate limit when since = now - period.
--
-- No SET search_path, unlike every other pgqueue function: with one, the server sets
-- and restores search_path around every call, about 5 us (a third more per call; once
-- per rate-limited group a claim visits, in claim_limited()). Instead every name in the
-- body is qualified (functions, operators, types), so it means the same whatever the
-- caller's search_path (tests/e2e/test_search_path.py checks both). ROWS FROM (two unnests)
-- is what an unqualified unnest(slots, counts) in FROM stands for.
CREATE OR REPLACE FUNCTION pgqueue.rate_used(
    slots timestamptz[], counts integer[], since timestamptz
) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT COALESCE(pg_catalog.sum(u.n), 0)::pg_catalog.int4
      FROM ROWS FROM (pg_catalog.unnest(slots), pg_catalog.unnest(counts)) AS u(slot, n)
     WHERE u.slot OPERATOR(pg_catalog.>=) since
$$;
