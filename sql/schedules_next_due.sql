-- Seconds until the earliest tick of any active schedule (NULL: none), on the database
-- clock; a tick stored outside the due-time bounds (docs/security.md, Input limits)
-- counts as at the nearest bound, so that the subtraction cannot fail.
SELECT extract(epoch FROM CASE WHEN m < timestamptz '1970-01-01 00:00:00+00'
                               THEN timestamptz '1970-01-01 00:00:00+00'
                               WHEN m > timestamptz '9999-12-31 00:00:00+00'
                               THEN timestamptz '9999-12-31 00:00:00+00'
                               ELSE m END
                          - now())::double precision
FROM (SELECT min(next_fire_at) AS m FROM pgqueue.schedules WHERE enabled AND NOT paused) s
