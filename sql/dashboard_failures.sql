-- The dashboard's Failures page: the newest %(scan)s failed runs (runs_failed_idx, most
-- recently finished first) grouped by task and error class (the error's first line up to
-- its first colon: `ValueError` of `ValueError: no such user`), with how many, first and
-- last seen, their queues and the newest run of each group; the largest groups first.
-- Each row also says how many failed runs were read.
WITH f AS MATERIALIZED (
    SELECT id, task, queue, finished_at,
           left(split_part(split_part(coalesce(error, ''), E'\n', 1), ':', 1), 200)
               AS error_class
    FROM pgqueue.runs
    WHERE state = 'failed'
    ORDER BY finished_at DESC
    LIMIT %(scan)s
)
SELECT task, error_class, count(*) AS n, min(finished_at) AS first_seen,
       max(finished_at) AS last_seen, array_agg(DISTINCT queue) AS queues,
       max(id) AS last_id, (SELECT count(*) FROM f) AS scanned
FROM f
GROUP BY task, error_class
ORDER BY count(*) DESC, max(finished_at) DESC
LIMIT %(limit)s
