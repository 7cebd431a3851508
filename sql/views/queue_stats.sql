-- Per queue: live runs by state (each count reads the partial index of its state, so
-- it costs the size of the backlog, never of the history), the oldest queued run's
-- age, and what finished in the last minute and hour, in 5-second buckets
-- (pgqueue.finished_buckets: the workers' tally, and the runs of the last few seconds).
-- Pickup latency (started_at - run_at) and duration (finished_at - started_at) of the
-- runs that finished in the last minute, as p50 and p95 from their histograms
-- (pgqueue.latency_tally and pgqueue.latency_bin: within 4.4% of the exact percentile,
-- for the cost of a few hundred bins whatever the rate). All-time totals of
-- finished runs are deliberately not here: they cost a scan of the whole history (see
-- docs/sql.md). Limits last, with the rate limits' current use (docs/flow_control.md).
CREATE OR REPLACE VIEW pgqueue.queue_stats AS
WITH live AS (
    SELECT queue, 'scheduled' AS state, count(*) AS n, NULL::timestamptz AS oldest
      FROM pgqueue.runs WHERE state = 'scheduled' GROUP BY queue
    UNION ALL
    -- due times clamped to the range migration 0022 enforces: a row stored before it
    -- (infinity, a BC date) must not fail the view (subtracting an infinite timestamp
    -- fails before PostgreSQL 16)
    SELECT queue, 'queued', count(*),
           least(greatest(min(run_at), timestamptz '1970-01-01 00:00:00+00'),
                 timestamptz '9999-12-31 00:00:00+00')
      FROM pgqueue.runs WHERE state = 'queued' GROUP BY queue
    UNION ALL
    SELECT queue, 'running', count(*), NULL
      FROM pgqueue.runs WHERE state = 'running' GROUP BY queue
    UNION ALL
    SELECT queue, 'waiting', count(*), NULL
      FROM pgqueue.runs WHERE state = 'waiting' GROUP BY queue
),
recent AS (
    SELECT queue,
           sum(n) FILTER (WHERE bucket >= now() - interval '1 minute') AS finished_last_minute,
           sum(n) AS finished_last_hour,
           sum(n) FILTER (WHERE state = 'succeeded') AS succeeded_last_hour,
           sum(n) FILTER (WHERE state = 'failed') AS failed_last_hour
    FROM pgqueue.finished_buckets
    WHERE bucket >= now() - interval '1 hour'
    GROUP BY queue
),
-- Latency histograms of the last minute: the workers' tally, and at most 1,000 of the
-- runs finished since its mark (the few seconds it trails by; the cap keeps the cost of
-- this view independent of the rate). Those runs are read from runs_finished_queue_idx
-- by (queue, finished_at), at most 1,000 per queue, the first 1,000 of them kept: the
-- queues come from a loose scan of that index (`walk`, as
-- sql/parts/finished_queues.sql, written out: a view's text is loaded as written).
unfolded AS (
    SELECT r.queue, k.kind, pgqueue.latency_bin(k.seconds) AS bin, k.seconds
    FROM (SELECT f.queue, f.run_at, f.started_at, f.finished_at
          FROM (WITH RECURSIVE walk(queue) AS (
                    SELECT min(f.queue) FROM pgqueue.runs f
                    WHERE f.state IN ('succeeded', 'failed', 'canceled')
                    UNION ALL
                    SELECT (SELECT min(f.queue) FROM pgqueue.runs f
                            WHERE f.state IN ('succeeded', 'failed', 'canceled')
                              AND f.queue > w.queue)
                    FROM walk w
                    WHERE w.queue IS NOT NULL
                )
                SELECT queue FROM walk WHERE queue IS NOT NULL) q
          CROSS JOIN LATERAL (
              SELECT q.queue, r.run_at, r.started_at, r.finished_at
              FROM pgqueue.runs r
              WHERE r.state IN ('succeeded', 'failed', 'canceled')
                AND r.queue = q.queue
                AND r.finished_at >= greatest(pgqueue.tally_upto(),
                                              now() - interval '1 minute')
                AND r.started_at IS NOT NULL
              ORDER BY r.finished_at
              LIMIT 1000
          ) f
          ORDER BY f.finished_at
          LIMIT 1000) r,
         LATERAL (VALUES ('pickup',
                          date_part('epoch', r.started_at
                                    - least(greatest(r.run_at,
                                                     timestamptz '1970-01-01 00:00:00+00'),
                                            timestamptz '9999-12-31 00:00:00+00'))),
                         ('duration', date_part('epoch', r.finished_at - r.started_at)))
             AS k(kind, seconds)
),
bins AS (
    SELECT queue, kind, bin, sum(n) AS n, sum(seconds) / sum(n) AS mean
    FROM (SELECT queue, kind, bin, n, seconds
          FROM pgqueue.latency_tally
          WHERE bucket >= now() - interval '1 minute'
          UNION ALL
          SELECT queue, kind, bin, 1, seconds FROM unfolded) b
    GROUP BY 1, 2, 3
),
ranked AS (
    SELECT queue, kind, mean,
           sum(n) OVER (PARTITION BY queue, kind ORDER BY bin) AS upto,
           sum(n) OVER (PARTITION BY queue, kind) AS total
    FROM bins
),
-- A percentile is the mean of the first bin whose running count reaches its rank (bins
-- are in order of latency, so that bin's mean is the least of those that do).
latency AS (
    SELECT queue,
           min(mean) FILTER (WHERE kind = 'pickup' AND upto >= 0.5 * total)
               AS pickup_p50_seconds,
           min(mean) FILTER (WHERE kind = 'pickup' AND upto >= 0.95 * total)
               AS pickup_p95_seconds,
           min(mean) FILTER (WHERE kind = 'duration' AND upto >= 0.5 * total)
               AS duration_p50_seconds,
           min(mean) FILTER (WHERE kind = 'duration' AND upto >= 0.95 * total)
               AS duration_p95_seconds
    FROM ranked
    GROUP BY queue
),
names AS (
    SELECT name AS queue FROM pgqueue.queues
    UNION SELECT queue FROM live
    UNION SELECT queue FROM recent
)
SELECT n.queue,
       coalesce(q.paused, false) AS paused,
       coalesce((SELECT l.n FROM live l WHERE l.queue = n.queue AND l.state = 'scheduled'), 0)
           AS scheduled,
       coalesce((SELECT l.n FROM live l WHERE l.queue = n.queue AND l.state = 'queued'), 0)
           AS queued,
       coalesce((SELECT l.n FROM live l WHERE l.queue = n.queue AND l.state = 'running'), 0)
           AS running,
       coalesce((SELECT l.n FROM live l WHERE l.queue = n.queue AND l.state = 'waiting'), 0)
           AS waiting,
       extract(epoch FROM now() - (SELECT l.oldest FROM live l
                                    WHERE l.queue = n.queue AND l.state = 'queued'))
           ::double precision AS oldest_queued_seconds,
       coalesce(r.finished_last_minute, 0)::bigint AS finished_last_minute,
       coalesce(r.finished_last_hour, 0)::bigint AS finished_last_hour,
       coalesce(r.succeeded_last_hour, 0)::bigint AS succeeded_last_hour,
       coalesce(r.failed_last_hour, 0)::bigint AS failed_last_hour,
       p.pickup_p50_seconds, p.pickup_p95_seconds,
       p.duration_p50_seconds, p.duration_p95_seconds,
       q.concurrency, q.group_concurrency,
       -- rate limits as declared ('100/m'), and the starts in the last period
       q.rate_limit || '/' || CASE q.rate_period WHEN 1 THEN 's' WHEN 60 THEN 'm' ELSE 'h' END
           AS rate_limit,
       CASE WHEN q.rate_limit IS NOT NULL
            THEN pgqueue.rate_used(q.rate_slots, q.rate_counts,
                                   now() - q.rate_period * interval '1 second') END
           AS rate_used,
       q.group_rate_limit || '/'
           || CASE q.group_rate_period WHEN 1 THEN 's' WHEN 60 THEN 'm' ELSE 'h' END
           AS group_rate_limit,
       coalesce(q.ordered, false) AS ordered
FROM names n
LEFT JOIN pgqueue.queues q ON q.name = n.queue
LEFT JOIN recent r ON r.queue = n.queue
LEFT JOIN latency p ON p.queue = n.queue;
