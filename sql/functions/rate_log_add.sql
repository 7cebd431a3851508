-- A rate log with `n` (0 or more) more starts at time `at`, for a limit of period `period` seconds:
-- entries older than the period are dropped, and the starts go to the slot of `at`,
-- rounded UP to a fiftieth of the period (added to the newest entry when that is this
-- slot or a later one). Rounding up only ever counts a start as later than it was, so
-- the limit holds in every interval; it keeps the log at about fifty entries, in time
-- order, at a cost of at most a fiftieth of the period before a start's place is free
-- again (the rate reaches 98% of the limit). claim_rated.sql keeps a queue's log by the same
-- rule in its own text (tests/worker/test_flow_control.py checks that they agree).
CREATE OR REPLACE FUNCTION pgqueue.rate_log_add(
    INOUT slots timestamptz[], INOUT counts integer[], n integer, at timestamptz,
    period double precision
)
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    grid double precision := period / 50;
    slot timestamptz := to_timestamp(ceil(extract(epoch FROM at) / grid) * grid);
    since timestamptz := at - period * interval '1 second';
    first integer := 1;
    last integer := coalesce(cardinality(slots), 0);
BEGIN
    WHILE first <= last AND slots[first] < since LOOP
        first := first + 1;
    END LOOP;
    IF first > 1 THEN
        slots := coalesce(slots[first:last], '{}');
        counts := coalesce(counts[first:last], '{}');
        last := last - first + 1;
    END IF;
    IF n = 0 THEN
        RETURN;
    ELSIF last > 0 AND slots[last] >= slot THEN
        counts[last] := counts[last] + n;
    ELSE
        slots := slots || slot;
        counts := counts || n;
    END IF;
END
$$;
