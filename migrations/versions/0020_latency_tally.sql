-- pgqueue 0020: latency histograms in the tally. pgqueue.queue_stats took its pickup and
-- duration percentiles from every run that finished in the last minute: at 1,000 runs/s,
-- 60,000 rows read and sorted four times, 90 to 140 ms per look. Workers now fold them
-- into histograms (one row per 5-second bucket, queue, kind and bin of
-- pgqueue.latency_bin) as they fold the counts.
CREATE TABLE pgqueue.latency_tally (
    bucket  timestamptz NOT NULL,
    queue   text NOT NULL,
    kind    text NOT NULL CHECK (kind IN ('pickup', 'duration')),
    bin     smallint NOT NULL,
    n       bigint NOT NULL,
    seconds double precision NOT NULL,  -- the sum of the bin's latencies
    PRIMARY KEY (bucket, queue, kind, bin)
);

-- The minute before the mark, so that an upgrade does not blank the percentiles.
INSERT INTO pgqueue.latency_tally (bucket, queue, kind, bin, n, seconds)
SELECT date_bin('5 seconds', r.finished_at, timestamptz '2000-01-01 UTC'), r.queue, k.kind,
       pgqueue.latency_bin(k.seconds), count(*), sum(k.seconds)
FROM pgqueue.runs r,
     LATERAL (VALUES ('pickup', date_part('epoch', r.started_at - r.run_at)),
                     ('duration', date_part('epoch', r.finished_at - r.started_at)))
         AS k(kind, seconds)
WHERE r.state IN ('succeeded', 'failed', 'canceled')
  AND r.finished_at >= (SELECT upto - interval '1 minute' FROM pgqueue.tally_mark)
  AND r.finished_at < (SELECT upto FROM pgqueue.tally_mark)
  AND r.started_at IS NOT NULL
GROUP BY 1, 2, 3, 4;
