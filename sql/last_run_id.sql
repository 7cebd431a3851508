-- Where a bulk action stops: the newest run's id (0 if none) and the database's clock.
-- A cancel reaches runs up to that id, a retry runs that finished by then: the runs that
-- existed when it was asked for, not those enqueued or finished while it works.
SELECT coalesce(max(id), 0), now() FROM pgqueue.runs
