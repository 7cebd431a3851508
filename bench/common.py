"""Shared pieces: scratch databases, bulk loading, workers in subprocesses, statistics."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue.db import migrate

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SERVER = os.environ.get(
    "PGQUEUE_BENCH_SERVER", "postgresql://postgres@127.0.0.1:5432/postgres"
)
DEFAULT_DB = "pgqueue_bench"

Conn = psycopg.Connection[tuple[Any, ...]]


# -- scratch databases -------------------------------------------------------------------


@dataclass
class Scratch:
    """One scratch database on the server, dropped and recreated (and migrated) per run."""

    server: str = DEFAULT_SERVER
    name: str = DEFAULT_DB

    @property
    def dsn(self) -> str:
        return make_conninfo(self.server, dbname=self.name)

    def _admin(self) -> Conn:
        return psycopg.connect(self.server, autocommit=True)

    def drop(self) -> None:
        with self._admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name))
            )

    def fresh(self) -> str:
        """Drop, create and migrate the scratch database; returns its DSN."""
        self.drop()
        with self._admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        migrate.upgrade(self.dsn)
        return self.dsn

    def connect(self) -> Conn:
        return psycopg.connect(self.dsn, autocommit=True)


def bulk_load(
    conn: Conn,
    n: int,
    *,
    task: str = "bench.noop",
    queue: str = "bench",
    state: str = "queued",
    run_at: str = "now()",
) -> None:
    """Insert n rows shaped like enqueued runs with INSERT ... SELECT generate_series.

    state 'scheduled' needs a future run_at (e.g. "now() + interval '1 day'"); state
    'succeeded' gets finished_at and attempt 1 like finished history.
    """
    finished = "now()" if state in ("succeeded", "failed", "canceled") else "NULL"
    attempt = "1" if finished != "NULL" else "0"
    conn.execute(
        sql.SQL(
            "INSERT INTO pgqueue.runs (task, queue, state, args, kwargs, run_at, attempt,"
            " started_at, finished_at)"
            " SELECT {task}, {queue}, {state}, jsonb_build_array(g), '{{}}'::jsonb, {run_at},"
            " {attempt}, {finished}, {finished}"
            " FROM generate_series(1, {n}) AS g"
        ).format(
            task=sql.Literal(task),
            queue=sql.Literal(queue),
            state=sql.Literal(state),
            run_at=sql.SQL(run_at),
            attempt=sql.SQL(attempt),
            finished=sql.SQL(finished),
            n=sql.Literal(n),
        )
    )


def vacuum_analyze(conn: Conn) -> None:
    """What autovacuum would have done by now (it is off on the bench server)."""
    conn.execute("VACUUM (ANALYZE) pgqueue.runs")


# -- workers in subprocesses ---------------------------------------------------------------


def worker_command(
    dsn: str, queue: str, concurrency: int, *, burst: bool, extra: Sequence[str] = ()
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pgqueue",
        "worker",
        "--app",
        "bench.apps:app",
        "--dsn",
        dsn,
        "--queues",
        queue,
        "--concurrency",
        str(concurrency),
        "--log-level",
        "WARNING",
        *extra,
    ]
    if burst:
        cmd.append("--burst")
    return cmd


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


@contextlib.contextmanager
def running(cmd: Sequence[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A long-running subprocess, terminated (then killed) on exit."""
    proc = subprocess.Popen(list(cmd), cwd=ROOT, env=subprocess_env())
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for_listener(conn: Conn, dbname: str, channel: str = "", timeout: float = 20.0) -> None:
    """Until some backend of `dbname` has run a LISTEN (on `channel`, if given) and sits
    idle. The caller should still give it a moment for the other LISTENs it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = %s AND state = 'idle' AND query ILIKE %s",
            (dbname, f"LISTEN {channel}%"),
        ).fetchone()
        if row and row[0]:
            return
        time.sleep(0.05)
    raise TimeoutError(f"no LISTEN {channel or '*'} on {dbname} within {timeout}s")


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat; (0, 0) where unavailable."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0, 0
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of `pids` (those that still exist)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def status_mb(pid: int, key: str) -> float:
    """A memory figure of /proc/<pid>/status in MB: "VmRSS" (resident now) or "VmHWM"
    (peak resident so far); 0 if the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (/proc/<pid>/task/*/children), those that still exist."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except FileNotFoundError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/children") as f:
                    todo += [int(x) for x in f.read().split()]
            except FileNotFoundError:
                continue
    return out


def cpu_mark() -> tuple[int, int]:
    """A mark for busy_since()."""
    return _cpu_ticks()


def busy_since(mark: tuple[int, int]) -> float:
    """The share of all CPUs busy since `mark` (every process on the machine: PostgreSQL,
    the worker, and any neighbours)."""
    now = _cpu_ticks()
    busy, total = now[0] - mark[0], now[1] - mark[1]
    return busy / total if total else float("nan")


def dbname_of(dsn: str) -> str:
    return str(conninfo_to_dict(dsn)["dbname"])


# -- figures ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


@dataclass
class Figure:
    """One reported number: samples (one per repeat), its target, an optional baseline."""

    name: str
    unit: str
    samples: list[float] = field(default_factory=list)
    target: float | None = None
    higher_is_better: bool = True
    baseline: str | None = None  # what the ratio compares against
    ratios: list[float] = field(default_factory=list)  # per repeat: value / baseline
    command: str = ""
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def ratio(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "-"
        ok = self.median >= self.target if self.higher_is_better else self.median <= self.target
        return "PASS" if ok else "FAIL"

    def target_text(self) -> str:
        if self.target is None:
            return "-"
        return f"{'>=' if self.higher_is_better else '<='} {fmt(self.target)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "samples": self.samples,
            "median": self.median,
            "target": self.target,
            "higher_is_better": self.higher_is_better,
            "verdict": self.verdict,
            "baseline": self.baseline,
            "ratios": self.ratios,
            "ratio": self.ratio,
            "command": self.command,
            "note": self.note,
        }


def fmt(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def table(figures: Sequence[Figure]) -> str:
    """A Markdown table of the figures (also readable in a terminal)."""
    head = ["benchmark", "median", "unit", "runs", "target", "verdict", "ratio", "vs baseline"]
    rows = [head, ["---"] * len(head)]
    for f in figures:
        rows.append(
            [
                f.name,
                fmt(f.median),
                f.unit,
                " / ".join(fmt(s) for s in f.samples),
                f.target_text(),
                f.verdict,
                f"{f.ratio:.2f}" if f.ratio is not None else "-",
                f.baseline or "-",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for r in rows:
        cells = [c.ljust(w) if c != "---" else "-" * w for c, w in zip(r, widths, strict=True)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(
    out: Path,
    stem: str,
    *,
    command: str,
    machine: dict[str, Any],
    started: float,
    figures: Sequence[Figure],
    details: dict[str, Any],
) -> Path:
    """Print the results table and notes, write raw samples to out/<stem>.json and EXPLAIN
    texts (details keys starting with explain_) to out/<key>.txt; return the JSON path."""
    print()
    print(table(figures))
    for f in figures:
        if f.note:
            print(f"  {f.name.strip()}: {f.note}")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}.json"
    raw = {k: v for k, v in details.items() if not k.startswith("explain_")}
    record = {
        "command": command,
        "machine": machine,
        "started": started,
        "seconds": time.time() - started,
        "figures": [f.as_dict() for f in figures],
        "details": raw,
    }
    path.write_text(json.dumps(record, indent=1, default=str))
    for key, text in details.items():
        if key.startswith("explain_"):
            (out / f"{key}.txt").write_text(text + "\n")
    print(f"\nraw samples: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path
