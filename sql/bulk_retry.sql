-- One batch of a bulk retry (pgqueue._bulk): the next `batch` runs in {states} (finished
-- states only) that match the filter, in (finished_at, id) order after the keyset
-- (after_at, after_id), each through pgqueue.retry(), so that every retry is recorded as
-- `pgqueue runs retry ID` records it. Only runs that finished up to `upto_at` (when the
-- action began): a retried run that fails again finishes later, and is not retried twice.
-- Reads runs_finished_queue_idx (or runs_failed_idx for failed runs) queue by queue in
-- its order, the next `batch` of each queue (a loose scan of its queues,
-- sql/parts/finished_queues.sql), and keeps the first `batch` of them. A queue's range
-- is bounded by row comparisons, not `queue = ...`: with that, a generic plan may take
-- the queue's whole history in a bitmap and sort it.
-- Returns the batch's last (finished_at, id) (NULL: nothing left) and how many it
-- queued again.
WITH batch AS (
    SELECT b.id, b.finished_at
    FROM {{finished_queues}} q
    CROSS JOIN LATERAL (
        SELECT r.id, r.finished_at
        FROM pgqueue.runs r
        WHERE r.state IN ({states})
          AND (r.queue, r.finished_at, r.id)
              > (q.queue, %(after_at)s::timestamptz, %(after_id)s::bigint)
          AND (r.queue, r.finished_at) <= (q.queue, %(upto_at)s::timestamptz)
          AND (%(task)s::text IS NULL OR r.task = %(task)s::text)
          AND (%(group)s::text IS NULL OR r.group_key = %(group)s::text)
          AND (%(error_class)s::text IS NULL
               OR split_part(split_part(coalesce(r.error, ''), E'\n', 1), ':', 1)
                  = %(error_class)s::text)
          AND (%(older_than)s::double precision IS NULL
               OR r.created_at
                  < now() - %(older_than)s::double precision * interval '1 second')
        ORDER BY r.queue, r.finished_at, r.id
        LIMIT {batch}
    ) b
    WHERE (%(queue)s::text IS NULL OR q.queue = %(queue)s::text)
    ORDER BY b.finished_at, b.id
    LIMIT {batch}
),
last AS (
    SELECT finished_at, id FROM batch ORDER BY finished_at DESC, id DESC LIMIT 1
)
SELECT (SELECT finished_at FROM last) AS last_at, (SELECT id FROM last) AS last_id,
       count(*) FILTER (WHERE pgqueue.retry(id)) AS changed
FROM batch
