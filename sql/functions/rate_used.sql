-- Starts a rate log (pgqueue.queues' or pgqueue.group_rates' rate_slots, rate_counts)
-- holds at or after `since`: the current use of a rate limit when since = now - period.
CREATE OR REPLACE FUNCTION pgqueue.rate_used(
    slots timestamptz[], counts integer[], since timestamptz
) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
    SELECT coalesce(sum(u.n), 0)::integer
      FROM unnest(slots, counts) AS u(slot, n)
     WHERE u.slot >= since
$$;
