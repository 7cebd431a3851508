-- Drop tally buckets older than a day, and latency histograms older than an hour (the
-- views read the last hour of counts and the last minute of latencies).
WITH latency AS (
    DELETE FROM pgqueue.latency_tally WHERE bucket < now() - interval '1 hour'
)
DELETE FROM pgqueue.finished_tally WHERE bucket < now() - interval '1 day'
