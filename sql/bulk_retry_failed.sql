-- One batch of a bulk retry of failed runs alone (pgqueue._bulk; {states} is 'failed'),
-- as bulk_retry.sql but reading runs_failed_idx (finished_at) in its order, every queue
-- at once (queue by queue, each queue without failed runs would read them all). The
-- next `batch` runs that match the filter, in (finished_at, id) order after the keyset
-- (after_at, after_id), each through pgqueue.retry(), so that every retry is recorded as
-- `pgqueue runs retry ID` records it. Only runs that finished up to `upto_at` (when the
-- action began): a retried run that fails again finishes later, and is not retried twice.
-- Returns the batch's last (finished_at, id) (NULL: nothing left) and how many it
-- queued again.
WITH batch AS (
    SELECT r.id, r.finished_at
    FROM pgqueue.runs r
    WHERE r.state IN ({states})
      AND r.finished_at <= %(upto_at)s::timestamptz
      AND r.finished_at >= %(after_at)s::timestamptz
      AND (r.finished_at, r.id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
      AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR r.task = %(task)s::text)
      AND (%(group)s::text IS NULL OR r.group_key = %(group)s::text)
      AND (%(error_class)s::text IS NULL
           OR split_part(split_part(coalesce(r.error, ''), E'\n', 1), ':', 1)
              = %(error_class)s::text)
      AND (%(older_than)s::double precision IS NULL
           OR r.created_at < now() - %(older_than)s::double precision * interval '1 second')
    ORDER BY r.finished_at, r.id
    LIMIT {batch}
),
last AS (
    SELECT finished_at, id FROM batch ORDER BY finished_at DESC, id DESC LIMIT 1
)
SELECT (SELECT finished_at FROM last) AS last_at, (SELECT id FROM last) AS last_id,
       count(*) FILTER (WHERE pgqueue.retry(id)) AS changed
FROM batch
