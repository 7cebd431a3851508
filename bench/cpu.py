"""Where a no-op run's CPU goes: the worker processes and the PostgreSQL server, per run.

    python -m bench.cpu --repeat 3                 # pgqueue, 1 and 2 worker processes
    python -m bench.cpu --libs pgqueue,pgqueuer    # the same for a peer (bench extra)

Per library, repeat and worker count: a fresh scratch database (bench.compare's), --runs
no-op jobs bulk-enqueued, the tables vacuumed and analyzed, then that many worker
processes started the library's way (bench.compare.Lib.workers) drain them. Between the
first job leaving the queue and the last finishing it reads:

- CPU seconds of the worker processes and of every `postgres` process on the machine
  (/proc/<pid>/stat, user + system), per run;
- how busy the machine was (/proc/stat), in cores;
- the largest peak resident set size (VmHWM) of the worker processes at the drain's end;
- from pg_stat_wal and pg_stat_database: WAL flushes (fsync), WAL records and commits,
  per 1,000 runs (PostgreSQL 14+), read after the workers exit (backends report these
  counts at most once a second); they include the workers' start and stop, a few
  statements.

With --bulk N it also times N samples of bulk enqueue per library and repeat (the
`bulk` step of bench.compare: 20 batches of 1,000 through the library's batch API).

The server must run on this machine (its processes are read from /proc), as the shared
test server and the embedded one do. Prints one line per drain, then the medians.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any

import psycopg

from bench import compare
from bench.common import DEFAULT_SERVER, cpu_seconds, status_mb

WAL = (
    "SELECT w.wal_sync, w.wal_records, d.xact_commit"
    " FROM pg_stat_wal w, pg_stat_database d WHERE d.datname = current_database()"
)


def postgres_pids(conn: psycopg.Connection[Any] | None = None) -> list[int]:
    """Every `postgres` process on the machine; with `conn`, only the backends connected
    to its database (--server-cpu backends: other load on a shared server left out)."""
    if conn is not None:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        ).fetchall()
        return [int(r[0]) for r in rows]
    out = subprocess.run(["pgrep", "-x", "postgres"], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def drain(
    lib: compare.Lib, workers: int, runs: int, backends_only: bool = False
) -> dict[str, float]:
    lib.fresh()
    try:
        lib.bulk(runs // 1000 - 2, 1000)  # bulk() adds 2 warm-up batches
        with psycopg.connect(lib.dsn, autocommit=True) as conn:
            # Autovacuum is off on our server: statistics as bench.compare's drains have
            # them (a peer's claim plans badly on a table it has never analyzed).
            lib.vacuum(conn)
            n, since = compare.unfinished(conn, lib), compare.db_clock(conn)
            marks: dict[str, Any] = {}
            server = conn if backends_only else None

            def on_start() -> None:
                marks["wal"] = conn.execute(WAL).fetchone()
                marks["t"], marks["w"] = time.monotonic(), cpu_seconds(pids)
                marks["pgpids"] = postgres_pids(server)
                marks["m"], marks["pg"] = machine_busy(), cpu_seconds(marks["pgpids"])

            with lib.workers(workers) as procs:
                pids = [p.pid for p in procs]
                compare.watch_drain(conn, lib, procs, n, since, on_start=on_start)
                t1, w1, m1 = time.monotonic(), cpu_seconds(pids), machine_busy()
                # The same processes as at the start (backends: also any opened since).
                pgpids = set(marks["pgpids"]) | set(postgres_pids(server))
                pg1 = cpu_seconds(list(pgpids))
                peak = max(status_mb(pid, "VmHWM") for pid in pids)
            # Backends report WAL and commit counts at most once a second, and when they
            # exit: read them once the workers (and so their backends) are gone.
            wal1 = conn.execute(WAL).fetchone()
    finally:
        lib.close()
        lib.drop()
    wal0, t0, w0, m0, pg0 = marks["wal"], marks["t"], marks["w"], marks["m"], marks["pg"]
    assert wal0 is not None and wal1 is not None
    per_k = [1000 * (b - a) / n for a, b in zip(wal0, wal1, strict=True)]
    return {
        "runs/s": n / (t1 - t0),
        "worker us/run": 1e6 * (w1 - w0) / n,
        "server us/run": 1e6 * (pg1 - pg0) / n,
        "busy cores": (m1[0] - m0[0]) / (m1[1] - m0[1]) * (os.cpu_count() or 1),
        "worker peak MB": peak,
        "flushes/1k": per_k[0],
        "WAL records/1k": per_k[1],
        "commits/1k": per_k[2],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--server", default=DEFAULT_SERVER)
    p.add_argument("--libs", default="pgqueue")
    p.add_argument("--runs", type=int, default=60_000, help="jobs per drain (multiple of 1,000)")
    p.add_argument("--workers", default="1,2", help="worker process counts")
    p.add_argument("--bulk", type=int, default=0, help="bulk enqueue samples (0: none)")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=OPTIONS",
        help="a pgqueue worker run with these extra `pgqueue worker` options, e.g."
        " 'plain=--no-tune-gc' (repeatable; measured alongside --libs, interleaved)",
    )
    p.add_argument(
        "--server-cpu",
        choices=["all", "backends"],
        default="all",
        help="server CPU of every postgres process (all), or only of the backends"
        " connected to the scratch database (backends: for a server with other load)",
    )
    args = p.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    variants = dict(v.split("=", 1) for v in args.variant)
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    print(f"`python -m bench.cpu {' '.join(sys.argv[1:] if argv is None else argv)}`")
    for r in range(args.repeat):
        for name in [*args.libs.split(","), *variants]:
            for workers in counts:
                if name in variants:
                    lib = compare.PgqueueLib("pgqueue", args.server)
                    lib.worker_args = tuple(shlex.split(variants[name]))
                else:
                    lib = compare.CLASSES[name](name, args.server)
                got = drain(lib, workers, args.runs, args.server_cpu == "backends")
                results.setdefault((name, workers), []).append(got)
                line = ", ".join(f"{k} {v:,.1f}" for k, v in got.items())
                print(f"  [r{r + 1}] {name}, {workers} worker(s): {line}", flush=True)
            if args.bulk and name not in variants:
                lib = compare.CLASSES[name](name, args.server)
                lib.fresh()
                try:
                    rates = [lib.bulk(20, 1000) for _ in range(args.bulk)]
                finally:
                    lib.close()
                    lib.drop()
                samples = " / ".join(f"{x:,.0f}" for x in rates)
                print(
                    f"  [r{r + 1}] {name}, bulk enqueue: {samples} jobs/s,"
                    f" median {statistics.median(rates):,.0f}",
                    flush=True,
                )
    keys: list[str] = list(next(iter(results.values()))[0])
    print()
    print("| library | workers | " + " | ".join(keys) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in keys) + " |")
    for (name, workers), rows in results.items():
        cells: list[Any] = [f"{statistics.median(r[k] for r in rows):,.1f}" for k in keys]
        print(f"| {name} | {workers} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
