"""The dashboard's server time with a large history: every page and JSON endpoint that
docs/dashboard.md lists, timed in the request handler (routing, queries, rendering; no network).

    python -m bench.dashboard [--finished 1000000] [--last-hour 0] [--queued 100000]
                              [--repeat 30] [--no-tally] [--search-index KIND ...]

The data: `--finished` finished runs over the last 7 days (2% failed, 1% canceled; the
retention a week of history implies), of which the last hour holds its share, plus
`--last-hour` more in the last hour (3,600,000 is a steady 1,000 runs/s);
`--queued` queued runs over four queues, one of them limited with 200 groups; 200
running runs, 1,000 scheduled and 100 waiting; ten live workers; five schedules. Each
figure is the median, 95th percentile and maximum of `--repeat` requests after two
warm-up requests. The `pgqueue queues` and `pgqueue runs list` calls (App.queue_summary,
App.list_runs) are timed the same way. The tally of finished runs is brought up to date
before timing, as running workers keep it; `--no-tally` leaves its mark an hour back,
so that what reads the last hour reads an hour of runs. `--search-index` builds the
indexes an operator builds on request (`pgqueue runs search-index --by KIND`) before timing;
without them, their lists read a bounded window.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import pgqueue
from bench.common import DEFAULT_SERVER, Scratch, vacuum_analyze
from pgqueue.dashboard.core import Dashboard, Request
from pgqueue.dashboard.data import FINISHED, make_cursor
from pgqueue.ops import search_indexes
from pgqueue.ops.retention import fold_tally

WORKERS = [f"00000000-0000-0000-0000-{i:012d}" for i in range(1, 11)]


def fill(conn: Any, finished: int, queued: int, last_hour: int = 0) -> None:
    """The runs, workers and schedules described above, with INSERT ... SELECT."""
    for n, span in ((finished, "7 days"), (last_hour, "1 hour")):
        if n:
            finished_runs(conn, n, span)
    queued_runs(conn, queued)


def finished_runs(conn: Any, n: int, span: str) -> None:
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
        FROM (SELECT g, now() - (%(n)s - g) * (%(span)s::interval / %(n)s) AS t
              FROM generate_series(1, %(n)s) g) x
        """,
        {"n": n, "span": span},
    )


def queued_runs(conn: Any, queued: int) -> None:
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
    # a cursor half way down the finished runs of a queue (a list in sections, deep)
    row = conn.execute(
        "SELECT finished_at, id FROM pgqueue.runs WHERE queue = 'crawl'"
        " AND state IN ('succeeded', 'failed', 'canceled') ORDER BY finished_at DESC, id DESC"
        " OFFSET (SELECT count(*) / 8 FROM pgqueue.runs"
        "         WHERE state IN ('succeeded', 'failed', 'canceled')) LIMIT 1"
    ).fetchone()
    deep = make_cursor(row[0], row[1], FINISHED)
    return [
        "/",
        "/parts/overview",
        "/api/queues",
        "/runs",
        "/api/runs",
        "/api/runs?state=queued",
        "/api/runs?state=queued&limit=500",
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
        # issue 43: filtered lists at depth, counts, totals, failures, audit, live parts
        "/runs?state=queued&queue=crawl",
        "/api/runs?state=queued&queue=reports",
        "/api/runs?state=succeeded&task=bench.task",
        "/api/runs?state=failed&queue=crawl",
        "/api/runs/count?state=queued&queue=crawl",
        "/api/runs/count?state=failed&queue=emails",
        "/api/runs/count?state=succeeded&task=bench.task",
        "/confirm?action=retry&state=failed&queue=emails",
        "/failures",
        "/api/failures",
        "/audit",
        "/parts/queues/crawl",
        f"/parts/runs/{queued}",
        # lists in sections (no state: a queue's or a task's unfinished runs, then its
        # finished ones), the unfiltered finished list, a group's runs anywhere
        "/api/runs?state=succeeded",
        "/api/runs?queue=crawl",
        f"/api/runs?queue=crawl&cursor={deep}",
        "/api/runs?task=bench.task",
        "/api/runs?group=tenant-9",
        "/api/runs?state=succeeded&group=tenant-9",
        "/api/runs?state=queued&queue=emails&group=tenant-9",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--last-hour", type=int, default=0)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="Reuse a filled database.")
    parser.add_argument("--no-tally", action="store_true", help="Leave the tally an hour back.")
    parser.add_argument(
        "--search-index",
        action="append",
        default=[],
        choices=sorted(search_indexes.SEARCH_INDEXES),
        help="Build these indexes first, as `pgqueue runs search-index --by KIND` does.",
    )
    args = parser.parse_args()

    scratch = Scratch(args.server, "pgqueue_bench_dashboard")
    if not args.keep:
        started = time.monotonic()
        scratch.fresh()
        with scratch.connect() as conn:
            fill(conn, args.finished, args.queued, args.last_hour)
            vacuum_analyze(conn)
        print(f"filled in {time.monotonic() - started:.0f} s")
    with scratch.connect() as conn:
        conn.autocommit = True
        conn.execute(
            "UPDATE pgqueue.tally_mark SET upto = date_bin('5 seconds',"
            " now() - interval '1 hour', timestamptz '2000-01-01 UTC')"
        )
        conn.execute("TRUNCATE pgqueue.finished_tally")
        if not args.no_tally:
            fold_tally(conn)
        for kind in args.search_index:
            search_indexes.build(conn, kind)
        conn.execute("ANALYZE pgqueue.runs")
        targets = paths(conn)
    dashboard = Dashboard(scratch.dsn)
    app = pgqueue.App(scratch.dsn)
    calls: list[tuple[str, Callable[[], Any]]] = [
        (path, functools.partial(get, dashboard, path)) for path in targets
    ]
    calls += [
        ("pgqueue queues", app.queue_summary),
        ("pgqueue runs list", functools.partial(app.list_runs, limit=20)),
        (
            "pgqueue runs list --state succeeded --queue emails",
            functools.partial(app.list_runs, state="succeeded", queue="emails", limit=20),
        ),
        (
            "pgqueue runs list --state canceled",
            functools.partial(app.list_runs, state="canceled", limit=20),
        ),
    ]
    print(f"{'path':<58} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7}")
    worst = 0.0
    for name, call in calls:
        times = []
        for i in range(args.repeat + 2):
            t0 = time.perf_counter()
            call()
            elapsed = (time.perf_counter() - t0) * 1000
            if i >= 2:
                times.append(elapsed)
        times.sort()
        p95 = times[max(0, int(len(times) * 0.95) - 1)]
        worst = max(worst, p95)
        print(f"{name:<58} {statistics.median(times):7.1f} {p95:7.1f} {times[-1]:7.1f}")
    print(f"slowest p95: {worst:.1f} ms")
    # An idle overview tab: one /parts/overview every X-Refresh-After seconds.
    times, waits = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        resp = dashboard.handle(request("/parts/overview"))
        times.append(time.perf_counter() - t0)
        waits.append(int(dict(resp.headers)["x-refresh-after"]))
    every = statistics.median(waits)
    cost = statistics.median(times) * 60 / every
    print(
        f"idle overview tab: a refresh every {every:.0f} s, {statistics.median(times) * 1000:.1f}"
        f" ms each (server time, the database's part and more): {cost:.3f} s a minute"
    )
    dashboard.close()
    app.close()


def get(dashboard: Dashboard, path: str) -> None:
    resp = dashboard.handle(request(path))
    assert resp.status == 200, (path, resp.status, resp.body[:200])


if __name__ == "__main__":
    main()
