-- How many runs in {states} match a bulk action's filter (pgqueue._bulk): what
-- `pgqueue runs cancel|retry` prints before it asks, and the dashboard before it acts.
-- Each state reads its partial index (runs_failed_idx for failed runs alone,
-- runs_finished_queue_idx for the others: a count reads every match, in no order, so
-- the whole index or, with a queue, that queue's part; a count of most of the table
-- may read the table instead).
SELECT count(*)
FROM pgqueue.runs r
WHERE r.state IN ({states})
  AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR r.task = %(task)s::text)
  AND (%(group)s::text IS NULL OR r.group_key = %(group)s::text)
  AND (%(error_class)s::text IS NULL
       OR split_part(split_part(coalesce(r.error, ''), E'\n', 1), ':', 1)
          = %(error_class)s::text)
  AND (%(older_than)s::double precision IS NULL
           OR r.created_at < now() - %(older_than)s::double precision * interval '1 second')
