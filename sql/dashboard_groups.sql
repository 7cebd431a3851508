-- The groups of one queue with live runs: runs holding a permit (running under an
-- unexpired lease, as claim_limited() counts them) and who they are, queued runs, and
-- deferred (scheduled or waiting) runs. One branch per state, each on its partial index.
WITH live AS (
    SELECT group_key, id, lease_expires_at > now() AS holds, 'running' AS state
      FROM pgqueue.runs WHERE state = 'running' AND queue = %(queue)s
    UNION ALL
    SELECT group_key, id, false, 'queued'
      FROM pgqueue.runs WHERE state = 'queued' AND queue = %(queue)s
    UNION ALL
    SELECT group_key, id, false, 'deferred'
      FROM pgqueue.runs WHERE state = 'scheduled' AND queue = %(queue)s
    UNION ALL
    SELECT group_key, id, false, 'deferred'
      FROM pgqueue.runs WHERE state = 'waiting' AND queue = %(queue)s
)
SELECT group_key,
       count(*) FILTER (WHERE holds) AS running,
       count(*) FILTER (WHERE state = 'queued') AS queued,
       count(*) FILTER (WHERE state = 'deferred') AS deferred,
       (array_agg(id ORDER BY id) FILTER (WHERE holds))[1:10] AS holders
FROM live
GROUP BY group_key
ORDER BY count(*) FILTER (WHERE holds) DESC, count(*) FILTER (WHERE state = 'queued') DESC,
         group_key
LIMIT %(limit)s
