"""The dashboard's server time with a large history: every page and JSON endpoint of
DESIGN 15, timed in the request handler (routing, queries, rendering; no network).

    python -m bench.dashboard [--finished 1000000] [--queued 100000] [--repeat 30]

The data: `--finished` finished runs over the last 7 days (2% failed, 1% canceled; the
retention a week of history implies), of which the last hour holds its share;
`--queued` queued runs over four queues, one of them limited with 200 groups; 200
running runs, 1,000 scheduled and 100 waiting; ten live workers; five schedules. Each
figure is the median, 95th percentile and maximum of `--repeat` requests after two
warm-up requests.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.common import DEFAULT_SERVER, Scratch, vacuum_analyze
from pgqueue.dashboard.core import Dashboard, Request

WORKERS = [f"00000000-0000-0000-0000-{i:012d}" for i in range(1, 11)]


def fill(conn: Any, finished: int, queued: int) -> None:
    """The runs, workers and schedules described above, with INSERT ... SELECT."""
    conn.execute(
        """
        INSERT INTO pgqueue.runs (task, queue, state, args, run_at, started_at, finished_at,
                                  attempt, error, group_key)
        SELECT 'bench.task', (ARRAY['emails', 'crawl', 'reports', 'default'])[1 + g %% 4],
               CASE WHEN g %% 100 < 2 THEN 'failed' WHEN g %% 100 = 2 THEN 'canceled'
                    ELSE 'succeeded' END,
               jsonb_build_array(g), t - interval '0.3 s', t - interval '0.2 s', t, 1,
               CASE WHEN g %% 100 < 2 THEN 'ValueError: bench' END,
               CASE WHEN g %% 4 = 1 THEN 'tenant-' || (g %% 200) ELSE '' END
        FROM (SELECT g, now() - (%(n)s - g) * (interval '7 days' / %(n)s) AS t
              FROM generate_series(1, %(n)s) g) x
        """,
        {"n": finished},
    )
    conn.execute(
        "INSERT INTO pgqueue.queues (name, concurrency, group_concurrency) VALUES ('crawl', 50, 2)"
    )
    conn.execute(
        """
        INSERT INTO pgqueue.runs (task, queue, group_key, limited, args, priority)
        SELECT 'bench.task', (ARRAY['emails', 'crawl', 'reports', 'default'])[1 + g %% 4],
               CASE WHEN g %% 4 = 1 THEN 'tenant-' || (g %% 200) ELSE '' END, g %% 4 = 1,
               jsonb_build_array(g), (g %% 3)::smallint
        FROM generate_series(1, %(n)s) g
        """,
        {"n": queued},
    )
    for statement in LIVE.split(";\n"):
        if statement.strip():
            conn.execute(statement, {"workers": WORKERS})


LIVE = """
        INSERT INTO pgqueue.runs (task, queue, group_key, limited, state, attempt, worker_id,
                                  lease_token, lease_expires_at, started_at)
        SELECT 'bench.task', (ARRAY['emails', 'crawl', 'reports', 'default'])[1 + g %% 4],
               CASE WHEN g %% 4 = 1 THEN 'tenant-' || (g %% 200) ELSE '' END, g %% 4 = 1,
               'running', 1, (%(workers)s::uuid[])[1 + g %% 10], gen_random_uuid(),
               now() + interval '30 s', now()
        FROM generate_series(1, 200) g;
        INSERT INTO pgqueue.runs (task, queue, state, run_at)
        SELECT 'bench.task', 'reports', 'scheduled', now() + g * interval '1 min'
        FROM generate_series(1, 1000) g;
        INSERT INTO pgqueue.runs (task, queue, state, wait_event, wait_key, wait_since, run_at)
        SELECT 'bench.flow', 'default', 'waiting', 'order.paid', 'order-' || g, now(),
               now() + interval '1 hour'
        FROM generate_series(1, 100) g;
        INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version)
        SELECT w, 'bench-' || n, 1000 + n, '{emails,crawl,reports,default}', 20, 'bench'
        FROM unnest(%(workers)s::uuid[]) WITH ORDINALITY AS u(w, n);
        INSERT INTO pgqueue.schedules (name, cron, task, next_fire_at)
        SELECT 'schedule-' || g, '*/5 * * * *', 'bench.task', now() + interval '5 min'
        FROM generate_series(1, 5) g;
        """


def request(path: str) -> Request:
    target, _, query = path.partition("?")
    params = dict(p.split("=", 1) for p in query.split("&") if p)
    return Request("GET", target, "", params, {}, {}, b"", "http://bench")


def paths(conn: Any) -> list[str]:
    def one(query: str) -> int:
        row = conn.execute(query).fetchone()
        return int(row[0])

    failed = one("SELECT max(id) FROM pgqueue.runs WHERE state = 'failed'")
    queued = one("SELECT max(id) FROM pgqueue.runs WHERE state = 'queued' AND queue = 'crawl'")
    return [
        "/",
        "/parts/overview",
        "/api/queues",
        "/runs",
        "/api/runs",
        "/api/runs?state=queued",
        "/api/runs?state=failed",
        "/api/runs?state=succeeded&queue=emails",
        "/api/runs?state=queued&queue=crawl&group=tenant-9",
        "/api/runs?q=ValueError",
        f"/runs/{failed}",
        f"/api/runs/{queued}",
        "/queues/crawl",
        "/api/queues/crawl",
        "/api/queues/emails",
        "/workers",
        "/api/workers",
        "/schedules",
        "/api/schedules",
        "/api/runs/count?action=retry&state=failed&queue=emails",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="Reuse a filled database.")
    args = parser.parse_args()

    scratch = Scratch(args.server, "pgqueue_bench_dashboard")
    if not args.keep:
        started = time.monotonic()
        scratch.fresh()
        with scratch.connect() as conn:
            fill(conn, args.finished, args.queued)
            vacuum_analyze(conn)
        print(f"filled in {time.monotonic() - started:.0f} s")
    dashboard = Dashboard(scratch.dsn)
    with scratch.connect() as conn:
        targets = paths(conn)
    print(f"{'path':<58} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7}")
    worst = 0.0
    for path in targets:
        times = []
        for i in range(args.repeat + 2):
            t0 = time.perf_counter()
            resp = dashboard.handle(request(path))
            elapsed = (time.perf_counter() - t0) * 1000
            assert resp.status == 200, (path, resp.status, resp.body[:200])
            if i >= 2:
                times.append(elapsed)
        times.sort()
        p95 = times[max(0, int(len(times) * 0.95) - 1)]
        worst = max(worst, p95)
        print(f"{path:<58} {statistics.median(times):7.1f} {p95:7.1f} {times[-1]:7.1f}")
    print(f"slowest p95: {worst:.1f} ms")
    dashboard.close()


if __name__ == "__main__":
    main()
