-- Raise datetime_field_overflow (22008) if a due time is outside the range pgqueue stores:
-- finite, from 1970-01-01 to 9999-12-31 00:00 UTC inclusive (the CHECK constraints of
-- migration 0022 hold the same bounds, and pgqueue/_checks.py gives the reasons).
CREATE OR REPLACE FUNCTION pgqueue.check_due(what text, due timestamptz) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
BEGIN
    IF due < timestamptz '1970-01-01 00:00:00+00'
       OR due > timestamptz '9999-12-31 00:00:00+00' THEN
        RAISE EXCEPTION 'pgqueue: % must be from 1970-01-01 to 9999-12-31 00:00 UTC, not %',
                        what, due
              USING ERRCODE = 'datetime_field_overflow',
                    HINT = 'give a finite time in that range (a time in the past means now)';
    END IF;
END
$$;
