-- pgqueue 0003: schedules, inspection views, retention indexes and autovacuum settings.

-- One row per cron schedule, written from code when a worker starts (pgqueue.schedules
-- module). A schedule removed from code is disabled, never deleted, so its history stays
-- readable. `paused` belongs to operators: a worker's sync never changes it.
-- The run options (queue, priority, ...) are resolved from the task at sync time, so any
-- worker can fire any schedule, even one whose task it does not import.
CREATE TABLE pgqueue.schedules (
    name            text PRIMARY KEY,
    cron            text NOT NULL,
    tz              text NOT NULL DEFAULT 'UTC',
    task            text NOT NULL,
    args            jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(args) = 'array'),
    kwargs          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(kwargs) = 'object'),
    queue           text NOT NULL DEFAULT 'default',
    priority        smallint NOT NULL DEFAULT 0,
    max_attempts    integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    timeout_seconds double precision CHECK (timeout_seconds > 0),
    group_key       text,
    catch_up        boolean NOT NULL DEFAULT false,
    enabled         boolean NOT NULL DEFAULT true,
    paused          boolean NOT NULL DEFAULT false,
    next_fire_at    timestamptz NOT NULL,  -- the next tick not yet enqueued
    last_fire_at    timestamptz,           -- the last tick enqueued
    last_run_id     bigint,                -- the run of that tick
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
) WITH (
    -- A per-second schedule rewrites its row every second. The table stays tiny (no
    -- index but the primary key, which next_fire_at is not part of), so these updates
    -- are HOT when the page has room, and vacuum runs after a fixed number of them.
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 200
);

-- Retention and `pgqueue.failed` read failed runs by finish time without walking the
-- (much larger) history of succeeded runs in runs_finished_idx.
CREATE INDEX runs_failed_idx ON pgqueue.runs (finished_at) WHERE state = 'failed';

-- Hot side tables (see docs/operations.md, "Autovacuum").
-- workers: every worker rewrites its row every lease/3 seconds (the heartbeat).
ALTER TABLE pgqueue.workers SET (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 200
);
-- steps and run_errors: written once per step / failed attempt, then deleted in bulk by
-- retention (cascading from runs). Vacuum them at a small fraction of dead rows, like runs.
ALTER TABLE pgqueue.steps SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.05
);
ALTER TABLE pgqueue.run_errors SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.05
);
ALTER TABLE pgqueue.events SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000
);

-- Per queue: live runs by state (each count reads the partial index of its state, so
-- it costs the size of the backlog, never of the history), the oldest queued run's
-- age, and what finished recently (runs_finished_idx). Pickup latency is
-- started_at - run_at and duration finished_at - started_at, over the runs that
-- finished in the last minute. All-time totals of finished runs are deliberately not
-- here: they cost a scan of the whole history (see docs/sql.md).
CREATE VIEW pgqueue.queue_stats AS
WITH live AS (
    SELECT queue, 'scheduled' AS state, count(*) AS n, NULL::timestamptz AS oldest
      FROM pgqueue.runs WHERE state = 'scheduled' GROUP BY queue
    UNION ALL
    SELECT queue, 'queued', count(*), min(run_at)
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
           count(*) FILTER (WHERE finished_at > now() - interval '1 minute')
               AS finished_last_minute,
           count(*) AS finished_last_hour,
           count(*) FILTER (WHERE state = 'succeeded') AS succeeded_last_hour,
           count(*) FILTER (WHERE state = 'failed') AS failed_last_hour,
           percentile_cont(0.5) WITHIN GROUP (
               ORDER BY extract(epoch FROM started_at - run_at)::double precision)
               FILTER (WHERE finished_at > now() - interval '1 minute')
               AS pickup_p50_seconds,
           percentile_cont(0.95) WITHIN GROUP (
               ORDER BY extract(epoch FROM started_at - run_at)::double precision)
               FILTER (WHERE finished_at > now() - interval '1 minute')
               AS pickup_p95_seconds,
           percentile_cont(0.5) WITHIN GROUP (
               ORDER BY extract(epoch FROM finished_at - started_at)::double precision)
               FILTER (WHERE finished_at > now() - interval '1 minute')
               AS duration_p50_seconds,
           percentile_cont(0.95) WITHIN GROUP (
               ORDER BY extract(epoch FROM finished_at - started_at)::double precision)
               FILTER (WHERE finished_at > now() - interval '1 minute')
               AS duration_p95_seconds
    FROM pgqueue.runs
    WHERE state IN ('succeeded', 'failed', 'canceled')
      AND finished_at > now() - interval '1 hour'
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
       coalesce(r.finished_last_minute, 0) AS finished_last_minute,
       coalesce(r.finished_last_hour, 0) AS finished_last_hour,
       coalesce(r.succeeded_last_hour, 0) AS succeeded_last_hour,
       coalesce(r.failed_last_hour, 0) AS failed_last_hour,
       r.pickup_p50_seconds, r.pickup_p95_seconds,
       r.duration_p50_seconds, r.duration_p95_seconds,
       q.concurrency, q.group_concurrency
FROM names n
LEFT JOIN pgqueue.queues q ON q.name = n.queue
LEFT JOIN recent r ON r.queue = n.queue;

-- Runs a worker holds now, with the worker and how long its lease has left.
CREATE VIEW pgqueue.running AS
SELECT r.id, r.task, r.queue, r.group_key, r.attempt, r.max_attempts, r.args, r.kwargs,
       r.started_at,
       extract(epoch FROM now() - r.started_at)::double precision AS running_seconds,
       r.lease_expires_at,
       extract(epoch FROM r.lease_expires_at - now())::double precision AS lease_left_seconds,
       r.worker_id, w.host, w.pid
FROM pgqueue.runs r
LEFT JOIN pgqueue.workers w ON w.id = r.worker_id
WHERE r.state = 'running';
