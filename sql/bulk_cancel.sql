-- One batch of a bulk cancel (pgqueue._bulk): up to `batch` runs in {state} (one live
-- state a statement) with an id up to `upto` that match the filter, each through
-- pgqueue.cancel(): a
-- running run is told to stop, a limited queue's permit waits for its code to end
-- (zombie_permits), a waiting parent is woken, exactly as `pgqueue runs cancel ID`. One
-- statement, so one short transaction per batch in autocommit. No keyset: a canceled run
-- leaves the live states (and their partial indexes, which this scan reads), so the next
-- batch finds the runs still to do; an empty batch ends the state. {order} is the key of
-- that state's partial index (pgqueue._bulk.CANCEL_ORDER): without an order an index
-- gives, a generic plan may fill the LIMIT by a sequential scan through all of history.
-- Returns how many runs the batch reached and how many it canceled.
WITH batch AS (
    SELECT r.id
    FROM pgqueue.runs r
    WHERE r.state = {state}
      AND r.id <= %(upto)s::bigint
      AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR r.task = %(task)s::text)
      AND (%(group)s::text IS NULL OR r.group_key = %(group)s::text)
      AND (%(error_class)s::text IS NULL
           OR split_part(split_part(coalesce(r.error, ''), E'\n', 1), ':', 1)
              = %(error_class)s::text)
      AND (%(older_than)s::double precision IS NULL
           OR r.created_at < now() - %(older_than)s::double precision * interval '1 second')
    ORDER BY {order}
    LIMIT {batch}
)
SELECT count(*) AS reached, count(*) FILTER (WHERE pgqueue.cancel(id, false, %(reason)s::text)) AS changed
FROM batch
