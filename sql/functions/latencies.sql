-- A finished run's two latencies, each with its histogram bin (pgqueue.latency_tally):
-- `pickup`, started_at - run_at (how long due work waited for a worker), and `duration`,
-- finished_at - started_at (its last attempt). Bins are 16 per doubling from 10 us up, so
-- the values in one bin are within 4.4% of each other; 10 us and under is bin 0. An SQL
-- function the planner inlines into the queries that read it (the tally keeper's fold,
-- pgqueue.queue_stats).
CREATE OR REPLACE FUNCTION pgqueue.latencies(
    run_at timestamptz, started_at timestamptz, finished_at timestamptz
) RETURNS TABLE (kind text, bin smallint, seconds double precision)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT k.kind, floor(16 * ln(greatest(k.seconds, 1e-5) * 1e5) / ln(2.0::float8))::smallint,
           k.seconds
    FROM (VALUES ('pickup', extract(epoch FROM started_at - run_at)::double precision),
                 ('duration', extract(epoch FROM finished_at - started_at)::double precision))
         AS k(kind, seconds)
$$;
