"""Run the pgqueue benchmarks by hand and print a results table.

    python -m bench.run all --repeat 3
    python -m bench.run enqueue-bulk enqueue-single
    python -m bench.run process --concurrency 10,50,200 --kinds sync,async
    python -m bench.run pickup
    python -m bench.run claim --background 500000

Each benchmark drops, recreates and migrates the scratch database (--db, default
pgqueue_bench) on the server (--server, default $PGQUEUE_BENCH_SERVER or
postgresql://postgres@127.0.0.1:5432/postgres) before every repeat, and drops it at the end.
Figures are medians of --repeat runs; ratios compare with a baseline measured in the same
repeat. Raw samples go to bench/out/<name>.json (--out).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench import cases
from bench.common import (
    DEFAULT_DB,
    DEFAULT_SERVER,
    ROOT,
    Figure,
    Scratch,
    busy_since,
    cpu_mark,
    write_report,
)

BENCHMARKS = ("enqueue-bulk", "enqueue-single", "process", "pickup", "claim")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _words(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("benchmarks", nargs="+", choices=("all", *BENCHMARKS))
    p.add_argument("--repeat", type=int, default=3, help="runs per figure (median reported)")
    p.add_argument("--server", default=DEFAULT_SERVER, help="DSN of a database on the server")
    p.add_argument("--db", default=DEFAULT_DB, help="scratch database name (dropped!)")
    p.add_argument(
        "--out",
        type=Path,
        default=ROOT / "bench" / "out",
        help="directory for raw samples and EXPLAIN output",
    )
    p.add_argument("--keep", action="store_true", help="keep the scratch database at the end")
    p.add_argument(
        "--snapshot",
        action="store_true",
        help="freeze the core (pgqueue/, sql/, migrations/ of the working tree) into a temp"
        " dir first and run everything, worker subprocesses included, against that copy",
    )
    p.add_argument(
        "--snapshot-rev",
        metavar="REV",
        help="like --snapshot, from `git archive REV` (e.g. HEAD) instead of the working tree",
    )
    g = p.add_argument_group("enqueue")
    g.add_argument("--batches", type=int, default=100, help="enqueue-bulk: batches timed")
    g.add_argument("--batch", type=int, default=1000, help="enqueue-bulk: runs per batch")
    g.add_argument("--single", type=int, default=3000, help="enqueue-single: runs timed")
    g = p.add_argument_group("process")
    g.add_argument("--runs", type=int, default=50_000, help="process: queued runs to drain")
    g.add_argument(
        "--concurrency",
        type=_ints,
        default=[10, 100, 500],
        help="process: worker concurrencies, comma-separated",
    )
    g.add_argument(
        "--kinds",
        type=_words,
        default=["sync", "async"],
        help="process: task kinds (sync runs in threads, async on the loop)",
    )
    g.add_argument(
        "--process-background",
        type=int,
        default=0,
        help="process: queued runs of another queue loaded first",
    )
    g = p.add_argument_group("pickup")
    g.add_argument("--pickups", type=int, default=400, help="pickup: runs measured")
    g = p.add_argument_group("claim")
    g.add_argument(
        "--background", type=int, default=500_000, help="claim: background rows per scenario"
    )
    g.add_argument("--claim-runs", type=int, default=20_000, help="claim: runs drained")
    g.add_argument("--claim-limit", type=int, default=10, help="claim: LIMIT per claim")
    g.add_argument(
        "--scenarios",
        type=_words,
        default=["empty", "other_queue", "future", "history"],
        help="claim: scenarios (empty is always included)",
    )
    args = p.parse_args(argv)
    if "all" in args.benchmarks:
        args.benchmarks = list(BENCHMARKS)
    if "empty" not in args.scenarios:
        args.scenarios.insert(0, "empty")
    return args


def machine(server: str) -> dict[str, Any]:
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute("SELECT version()").fetchone()
        settings: dict[str, str] = dict(
            conn.execute(
                "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name IN"
                " ('shared_buffers', 'synchronous_commit', 'fsync', 'autovacuum', 'jit',"
                " 'max_connections', 'work_mem')"
            ).fetchall()
        )
    import pgqueue

    return {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "postgres": row[0] if row else "?",
        "pg_settings": settings,
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "pgqueue": pgqueue.__version__,
        "pgqueue_path": str(Path(pgqueue.__file__).parent),
        "git": os.environ.get(SNAPSHOT_ENV) or _git_head(),
        "loadavg": os.getloadavg(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _git_head() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "pgqueue", "sql", "migrations"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "?"
    return out.stdout.strip() + (" (+ uncommitted core changes)" if dirty.stdout.strip() else "")


SNAPSHOT_ENV = "PGQUEUE_BENCH_SNAPSHOT"
COMMAND_ENV = "PGQUEUE_BENCH_COMMAND"


def make_snapshot(rev: str | None) -> tuple[Path, str]:
    """A frozen copy of the core laid out as installed (pgqueue/sql, pgqueue/migrations)
    plus bench/, so that concurrent edits of the working tree cannot change a run."""
    dest = Path(tempfile.mkdtemp(prefix="pgqueue-bench-"))
    src = ROOT
    if rev is not None:
        src = dest / "archive"
        src.mkdir()
        tar = subprocess.run(
            ["git", "archive", "--format=tar", rev, "pgqueue", "sql", "migrations"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=tar, check=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "out")
    shutil.copytree(src / "pgqueue", dest / "pgqueue", ignore=skip)
    shutil.copytree(src / "sql", dest / "pgqueue" / "sql", ignore=skip)
    shutil.copytree(src / "migrations", dest / "pgqueue" / "migrations", ignore=skip)
    shutil.copytree(ROOT / "bench", dest / "bench", ignore=skip)
    if rev is not None:
        shutil.rmtree(src)
    label = f"snapshot of {rev}" if rev else f"snapshot of the working tree at {_git_head()}"
    return dest, f"{label}, taken {time.strftime('%Y-%m-%d %H:%M:%S')}"


def run_in_snapshot(
    args: argparse.Namespace, argv: list[str], module: str = "bench.run", rev: str | None = None
) -> int:
    """Re-run `python -m <module> argv` inside a frozen copy of the core (make_snapshot)."""
    dest, label = make_snapshot(rev)
    print(f"running against a {label} in {dest}", flush=True)
    env = dict(os.environ)
    env[SNAPSHOT_ENV] = label
    env[COMMAND_ENV] = f"python -m {module} " + shlex.join(argv)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(dest), env.get("PYTHONPATH")]))
    child = [*argv, "--out", str(args.out.resolve())]
    try:
        return subprocess.run(
            [sys.executable, "-m", module, *child], cwd=dest, env=env, check=False
        ).returncode
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if (args.snapshot or args.snapshot_rev) and not os.environ.get(SNAPSHOT_ENV):
        return run_in_snapshot(args, argv, rev=args.snapshot_rev)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    command = os.environ.get(COMMAND_ENV) or "python -m bench.run " + shlex.join(argv)
    ctx = cases.Context(
        Scratch(args.server, args.db), args.repeat, command, log=lambda s: print(s, flush=True)
    )
    runners: dict[str, Callable[[], list[Figure]]] = {
        "enqueue-bulk": lambda: cases.enqueue_bulk(ctx, batches=args.batches, batch=args.batch),
        "enqueue-single": lambda: cases.enqueue_single(ctx, n=args.single),
        "process": lambda: cases.process(
            ctx,
            n=args.runs,
            concurrencies=args.concurrency,
            kinds=args.kinds,
            background=args.process_background,
        ),
        "pickup": lambda: cases.pickup(ctx, n=args.pickups),
        "claim": lambda: cases.claim(
            ctx,
            background=args.background,
            n=args.claim_runs,
            limit=args.claim_limit,
            scenarios=args.scenarios,
        ),
    }
    facts = machine(args.server)
    print(
        f"machine: nproc={facts['nproc']} ({facts['cpu']}), {facts['postgres'].split(',')[0]},"
        f" Python {facts['python']}, psycopg {facts['psycopg']}, pgqueue {facts['pgqueue']}"
        f" @ {facts['git']} ({facts['pgqueue_path']})",
        flush=True,
    )
    figures: list[Figure] = []
    started = time.time()
    try:
        for name in args.benchmarks:
            load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"== {name} (repeat {args.repeat}; load average {load})", flush=True)
            mark = cpu_mark()
            t0 = time.time()
            figures.extend(runners[name]())
            busy = busy_since(mark)
            ctx.details.setdefault("machine_busy", {})[name] = {
                "seconds": round(time.time() - t0, 1),
                "load_before": load,
                "cpu_busy": round(busy, 3),
            }
            took = time.time() - t0
            print(f"   {name}: {took:.0f}s, all CPUs {100 * busy:.0f}% busy", flush=True)
    finally:
        if not args.keep:
            ctx.scratch.drop()
    write_report(
        args.out,
        "-".join(args.benchmarks) if len(args.benchmarks) < len(BENCHMARKS) else "all",
        command=command,
        machine=facts,
        started=started,
        figures=figures,
        details=ctx.details,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
