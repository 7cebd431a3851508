"""Every enqueue path of two trees against each other, without the commit flush.

    python -m bench.enqueue_paths --tree old=/path/to/old --tree new=. --pairs 8

Each path runs through the public API on one connection inside a transaction (rolled back
after each path), so that what is timed is pgqueue's Python, the round trip and the
statement, not the WAL flush that dominates a committed enqueue (bench.enqueue):

- `single plain`: `Task.options(conn=c).enqueue(i)` (sql/enqueue_run_plain.sql);
- `single delay=0`: the same with `delay=0` (sql/enqueue_run.sql);
- `single unique`: the same with a unique key (sql/enqueue_unique.sql);
- `many 1000`: `enqueue_many` of 1,000 runs (sql/enqueue_runs_plain.sql);
- `insert_runs 100` and `... keyed`: `Enqueuer.insert_runs` of 100 rows, without and with
  idempotency keys (sql/enqueue_runs.sql, enqueue_runs_keyed.sql).

Each tree runs in a process of its own (`PYTHONPATH=<tree>`, its pgqueue, its sql/ linked
as `pgqueue/sql` as in bench/RESULTS.md's Method) on a database of its own, migrated by that
tree; rounds go A B B A. Per path: each tree's median wall and client CPU per call, and the
median (and range) of the ratios of the pairs run back to back.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from psycopg.conninfo import make_conninfo

from bench.common import DEFAULT_SERVER


def measure(dsn: str, rounds: int) -> dict[str, list[float]]:
    """This process's tree: per path, the medians over `rounds` of wall and CPU per call."""
    import psycopg

    import pgqueue
    from pgqueue.enqueue.options import EnqueueOptions

    app = pgqueue.App(dsn=dsn)

    @app.task(name="paths.noop", queue="paths")
    async def noop(i: int = 0) -> None:
        """No-op."""

    def rows(n: int, keyed: bool) -> list[Any]:
        def key() -> str | None:
            return f"k{time.perf_counter_ns()}" if keyed else None

        return [noop.make_row((j,), {}, EnqueueOptions(idempotency_key=key())) for j in range(n)]

    out: dict[str, list[tuple[float, float]]] = {}
    with psycopg.connect(dsn) as conn:
        paths: dict[str, tuple[int, Callable[[int], object]]] = {
            "single plain": (2000, lambda i: noop.options(conn=conn).enqueue(i)),
            "single delay=0": (2000, lambda i: noop.options(conn=conn, delay=0).enqueue(i)),
            "single unique": (
                500,
                lambda i: noop.options(conn=conn, unique_key=f"u{time.perf_counter_ns()}").enqueue(
                    i
                ),
            ),
            "many 1000": (
                20,
                lambda i: noop.options(conn=conn).enqueue_many([(j,) for j in range(1000)]),
            ),
            "insert_runs 100": (
                100,
                lambda i: app.enqueuer.insert_runs(rows(100, False), conn=conn),
            ),
            "insert_runs 100 keyed": (
                100,
                lambda i: app.enqueuer.insert_runs(rows(100, True), conn=conn),
            ),
        }
        for _ in range(rounds):
            for name, (n, call) in paths.items():
                for i in range(20):
                    call(i)
                c0, t0 = time.process_time(), time.perf_counter()
                for i in range(n):
                    call(i)
                wall = (time.perf_counter() - t0) / n * 1e6
                out.setdefault(name, []).append((wall, (time.process_time() - c0) / n * 1e6))
                conn.rollback()
    return {
        name: [statistics.median(w for w, _ in v), statistics.median(c for _, c in v)]
        for name, v in out.items()
    }


def fresh(server: str, name: str, tree: str) -> str:
    """A database `name`, dropped, created and migrated by `tree`'s pgqueue; its DSN."""
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(server, dbname=name)
    code = "import sys; from pgqueue.db import migrate; migrate.upgrade(sys.argv[1])"
    subprocess.run([sys.executable, "-c", code, dsn], check=True, env=_env(tree), cwd="/")
    return dsn


def _env(tree: str) -> dict[str, str]:
    return os.environ | {"PYTHONPATH": os.path.abspath(tree)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", required=True, help="NAME=PATH, twice")
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3, help="rounds per process")
    p.add_argument("--server", default=DEFAULT_SERVER)
    p.add_argument("--measure", help=argparse.SUPPRESS)  # a child: measure on this DSN
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.rounds)))
        return 0
    trees = dict(t.split("=", 1) for t in args.tree)
    if len(trees) != 2:
        p.error("give two trees: --tree old=PATH --tree new=PATH")
    dsns = {name: fresh(args.server, f"enqueue_paths_{name}", path) for name, path in trees.items()}
    results: dict[str, list[dict[str, list[float]]]] = {name: [] for name in trees}
    names = list(trees)
    for pair in range(args.pairs):
        for name in names if pair % 2 == 0 else names[::-1]:
            # this file as a script: the tree's own pgqueue (and bench.common) are imported
            child = [sys.executable, os.path.abspath(__file__), "--tree", "x=.", "--tree", "y=."]
            child += ["--rounds", str(args.rounds), "--measure", dsns[name]]
            env = _env(trees[name])
            done = subprocess.run(
                child, check=True, env=env, capture_output=True, text=True, cwd="/"
            )
            results[name].append(json.loads(done.stdout))
    a, b = names
    print(
        f"{args.pairs} pairs of {args.rounds} rounds, {b} / {a}; wall and client CPU per call, us"
    )
    print(f"| path | {a} wall | {b} wall | {b} / {a} (range) | {a} CPU | {b} CPU | {b} / {a} CPU |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for path in results[a][0]:

        def med(name: str, k: int, path: str = path) -> float:
            return statistics.median(r[path][k] for r in results[name])

        ratios = [y[path][0] / x[path][0] for x, y in zip(results[a], results[b], strict=True)]
        cpu = [y[path][1] / x[path][1] for x, y in zip(results[a], results[b], strict=True)]
        print(
            f"| {path} | {med(a, 0):.1f} | {med(b, 0):.1f} | **{statistics.median(ratios):.3f}** "
            f"({min(ratios):.2f} to {max(ratios):.2f}) | {med(a, 1):.1f} | {med(b, 1):.1f} | "
            f"{statistics.median(cpu):.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
