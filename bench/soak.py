"""Soak: minutes of enqueue + process at a steady rate; throughput, latency and bloat per minute.

    flock /tmp/pgqueue-bench.lock python -m bench.soak --minutes 10 --snapshot
    flock /tmp/pgqueue-bench.lock python -m bench.soak --minutes 10 --rate 1500
    python -m bench.soak --minutes 2 --interval 20 --rate 500     # a quick smoke run
    flock /tmp/pgqueue-bench.lock python -m bench.soak --minutes 30 --rate 1000 \
        --history 10000000 --keep 10000s                         # history at scale

A fresh scratch database (--db, default pgqueue_bench_soak) is created and migrated. Unless
--rate is given, a calibration first measures capacity: --procs worker processes of
--concurrency drain --calibrate queued no-op runs (throughput on the database clock, as in
bench.run process), and the soak rate is --load (default 0.5) of that. The database is
then created afresh for the soak itself. 0.5, not 0.7: the drain runs without a producer
competing for the CPUs, and on a shared 2-core machine it swings by 1.5x from one
calibration to the next; 0.7 of a lucky calibration was above what the workers sustain.

The soak: --procs `pgqueue worker` processes (bench.apps:app, queue `bench`, sync no-op
tasks, `--keep-succeeded KEEP`: the retention pruner stays on, with a short retention so that
history reaches a steady state within minutes instead of growing for 7 days) and, in this
process, a producer that enqueues at a fixed rate with `noop.enqueue_many` every --tick
seconds (rate x tick runs per call: one transaction, one NOTIFY). After --warmup seconds,
every --interval seconds (one "minute") a sampler records:

- runs enqueued (producer) and completed (finished_at in the interval, database clock);
- queue depth (queued, running) and history (finished rows still kept);
- pickup latency p50 / p95 / p99 (started_at - run_at of the runs that finished in the
  interval), and the producer's enqueue_many latency p50 / p95 / p99;
- a claim probe: EXPLAIN (ANALYZE, BUFFERS) of claim.sql on the soak queue in a rolled-back
  transaction (execution ms and shared buffers touched: dead index entries show up here);
- for every pgqueue table: n_live_tup, n_dead_tup, inserts/updates/HOT updates/deletes,
  vacuum and autovacuum counts (pg_stat_user_tables), total size (pg_total_relation_size);
- CPU: the worker processes' and the database's backends' CPU time per completed run
  (/proc), and the share of the machine that was busy;
- what operators read (READS: the dashboard's overview, queue page and chart, `pgqueue
  queues`, `pgqueue runs list` with and without filters): each query's median of 3, in ms.

History at scale (--history N): before the soak, N succeeded runs are bulk-loaded with
finished_at spread over the --keep window, so that with N = rate x keep the pruner deletes
about as many old runs per second as the producer adds: the table holds N finished runs
throughout, and the question is whether anything drifts as it churns. A bulk load packs
runs_pkey's leaf pages 90% full, where the workers' own writes leave them about half full:
as the pruner replaces loaded runs by new ones, that index grows towards twice its loaded
size, which takes two to three retention windows. --history-fillfactor 48 rebuilds it at
the workers' density after the load, so that the soak starts from the history a running
install has.

Vacuum (--vacuum): autovacuum is off on the shared bench server, and the bench does not
change server settings. `auto` (the default) uses the server's autovacuum when it is on and
otherwise emulates it: every autovacuum_naptime (the server's setting, 60 s by default;
--naptime), a thread applies autovacuum's own trigger rules with each table's reloptions
(the migrations' per-table settings) and the server's defaults: VACUUM when n_dead_tup >
threshold + scale_factor x reltuples (or the insert rule), ANALYZE when n_mod_since_analyze
> analyze threshold + scale_factor x reltuples, under the table's cost delay and limit.
`off` never vacuums (the worst case). Emulated vacuums count as vacuum_count, the server's
as autovacuum_count.

--auto-explain MS: pg_stat_statements is not preloaded on the bench server, so this sets
session_preload_libraries = 'auto_explain' on the scratch database alone; the plans of
statements slower than MS land in the server log.

The verdict (issue 5): completed throughput may decline by at most 15% from the first to
the last interval (and, stricter, from the best interval to the last: a cold first interval
flatters first -> last). At a fixed rate below capacity, throughput only falls if the
workers stop keeping up, so pickup latency, the claim probe and CPU per run are reported
first to last as well: they move before throughput does. History at scale (issue 28):
completed throughput, pickup p99 and enqueue p99, the mean of the first five intervals
against the last five, within 10%. Raw samples:
bench/out/soak-*.json. Results and findings: bench/RESULTS.md, "Soak: 10 minutes steady
load".
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import apps, run
from bench.common import (
    DEFAULT_SERVER,
    ROOT,
    Conn,
    Figure,
    Scratch,
    bulk_load,
    busy_since,
    cpu_mark,
    fmt,
    percentile,
    subprocess_env,
    vacuum_analyze,
    worker_command,
    write_report,
)
from pgqueue.db import sql as _sql
from pgqueue.ops.retention import parse_duration
from pgqueue.worker.semaphores import ClaimMarks

QUEUE = apps.SYNC_QUEUE
DECLINE_TARGET = 15.0  # percent, first to last interval
READ_TARGET_MS = 100.0  # what an operator reads (READS) stays under this
FIVE = 5  # intervals at each end compared by the "first 5 → last 5" figures
ENDS_TARGET = 10.0  # percent: throughput, pickup p99 and enqueue p99, first 5 → last 5
CLK_TCK = os.sysconf("SC_CLK_TCK")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--minutes", type=int, default=10, help="intervals measured")
    p.add_argument("--interval", type=float, default=60.0, help="seconds per interval")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds before the first")
    p.add_argument("--rate", type=float, help="runs/s enqueued (default: --load x capacity)")
    p.add_argument("--load", type=float, default=0.5, help="share of the measured capacity")
    p.add_argument("--calibrate", type=int, default=30_000, help="runs drained to calibrate")
    p.add_argument("--procs", type=int, default=1, help="worker processes")
    p.add_argument("--concurrency", type=int, default=50, help="per worker process")
    p.add_argument("--tick", type=float, default=0.05, help="producer: seconds per batch")
    p.add_argument("--keep", default="2m", help="the workers' --keep-succeeded (history retention)")
    p.add_argument(
        "--history",
        type=int,
        default=0,
        help="finished runs bulk-loaded before the soak, spread over the --keep window (a"
        " retention that prunes what arrives: --history = rate x keep is a steady state)",
    )
    p.add_argument(
        "--history-fillfactor",
        type=int,
        metavar="PCT",
        help="after the bulk load, rebuild runs_pkey with its leaf pages PCT%% full (48: how"
        " full the workers' own writes leave them; the bulk load packs them 90%%)",
    )
    p.add_argument("--vacuum", choices=("auto", "server", "emulate", "off"), default="auto")
    p.add_argument("--naptime", type=float, help="emulated autovacuum_naptime (seconds)")
    p.add_argument(
        "--auto-explain",
        type=float,
        metavar="MS",
        help="log the plans of statements slower than MS in the scratch database to the"
        " server log (ALTER DATABASE ... SET session_preload_libraries = 'auto_explain')",
    )
    p.add_argument("--server", default=DEFAULT_SERVER, help="DSN of a database on the server")
    p.add_argument("--db", default="pgqueue_bench_soak", help="scratch database (dropped!)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    p.add_argument("--keep-db", action="store_true", help="keep the scratch database")
    p.add_argument("--snapshot", action="store_true", help="as bench.run --snapshot")
    p.add_argument("--snapshot-rev", metavar="REV", help="as bench.run --snapshot-rev")
    return p.parse_args(argv)


# -- the producer ----------------------------------------------------------------------------


class Producer(threading.Thread):
    """Enqueues `rate` runs/s of bench.noop: every `tick`, the runs due since the start
    in one enqueue_many (one INSERT, one transaction). Falls behind rather than dropping."""

    def __init__(self, rate: float, tick: float) -> None:
        super().__init__(daemon=True, name="producer")
        self.rate = rate
        self.tick = tick
        self.sent = 0
        self.calls: list[float] = []  # seconds per enqueue_many since the last take()
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        t0 = time.perf_counter()
        try:
            while not self._halt.is_set():
                due = int(self.rate * (time.perf_counter() - t0)) - self.sent
                if due > 0:
                    c0 = time.perf_counter()
                    apps.noop.enqueue_many([(self.sent + i,) for i in range(due)])
                    took = time.perf_counter() - c0
                    with self._lock:
                        self.sent += due
                        self.calls.append(took)
                self._halt.wait(self.tick)
        except BaseException as exc:  # reported by the sampler
            self.error = exc

    def take(self) -> tuple[int, list[float]]:
        with self._lock:
            calls, self.calls = self.calls, []
            return self.sent, calls

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


# -- autovacuum, emulated ------------------------------------------------------------------


TABLES = """
SELECT c.relname, greatest(c.reltuples, 0), s.n_dead_tup, s.n_mod_since_analyze,
       s.n_ins_since_vacuum, coalesce(c.reloptions, '{}')
FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind = 'r'
ORDER BY c.relname
"""

AV_SETTINGS = (
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_insert_threshold",
    "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_analyze_threshold",
    "autovacuum_analyze_scale_factor",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
    "vacuum_cost_limit",
    "autovacuum_naptime",
)


class Vacuumer(threading.Thread):
    """autovacuum's trigger rules (src/backend/postmaster/autovacuum.c, relation_needs_
    vacanalyze), applied every naptime to the pgqueue tables with their reloptions."""

    def __init__(self, dsn: str, naptime: float | None) -> None:
        super().__init__(daemon=True, name="vacuumer")
        self.dsn = dsn
        self.log: list[dict[str, Any]] = []
        self._halt = threading.Event()
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", (list(AV_SETTINGS),)
            ).fetchall()
        self.defaults = {name: float(value) for name, value in rows}
        if self.defaults["autovacuum_vacuum_cost_limit"] < 0:
            self.defaults["autovacuum_vacuum_cost_limit"] = self.defaults["vacuum_cost_limit"]
        self.naptime = naptime or self.defaults["autovacuum_naptime"]

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._halt.wait(self.naptime):
                for name, reltuples, dead, mod, ins, opts in conn.execute(TABLES).fetchall():
                    self.maybe_vacuum(conn, name, float(reltuples), dead, mod, ins, opts)

    def setting(self, opts: dict[str, float], name: str) -> float:
        return opts.get(name, self.defaults.get(name, 0.0))

    def bound(self, opts: dict[str, float], kind: str, reltuples: float) -> float:
        """autovacuum_<kind>_threshold + autovacuum_<kind>_scale_factor x reltuples."""
        threshold = self.setting(opts, f"autovacuum_{kind}_threshold")
        return threshold + self.setting(opts, f"autovacuum_{kind}_scale_factor") * reltuples

    def maybe_vacuum(
        self,
        conn: Conn,
        name: str,
        reltuples: float,
        dead: int,
        mod: int,
        ins: int,
        reloptions: Sequence[str],
    ) -> None:
        opts = {k: float(v) for k, _, v in (o.partition("=") for o in reloptions) if _is_num(v)}
        vac = dead > self.bound(opts, "vacuum", reltuples) or ins > self.bound(
            opts, "vacuum_insert", reltuples
        )
        anl = mod > self.bound(opts, "analyze", reltuples)
        if not (vac or anl):
            return
        table = sql.Identifier("pgqueue", name)
        if vac:
            conn.execute(
                sql.SQL("SET vacuum_cost_delay = {}").format(
                    sql.Literal(f"{self.setting(opts, 'autovacuum_vacuum_cost_delay')}ms")
                )
            )
            conn.execute(
                sql.SQL("SET vacuum_cost_limit = {}").format(
                    sql.Literal(int(self.setting(opts, "autovacuum_vacuum_cost_limit")))
                )
            )
        stmt = (
            sql.SQL("VACUUM (ANALYZE) {}")
            if vac and anl
            else sql.SQL("VACUUM {}")
            if vac
            else sql.SQL("ANALYZE {}")
        )
        t0 = time.perf_counter()
        conn.execute(stmt.format(table))
        self.log.append(
            {
                "at": time.time(),
                "table": name,
                "action": "vacuum analyze" if vac and anl else "vacuum" if vac else "analyze",
                "seconds": round(time.perf_counter() - t0, 3),
                "dead_before": dead,
                "reltuples": reltuples,
            }
        )

    def stop(self) -> None:
        self._halt.set()
        self.join(120)


def _is_num(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# -- sampling --------------------------------------------------------------------------------


def proc_cpu(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def backend_cpu(conn: Conn, dbname: str) -> dict[int, float]:
    pids = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (dbname,))
    out = {}
    for (pid,) in pids.fetchall():
        cpu = proc_cpu(pid)
        if cpu is not None:
            out[pid] = cpu
    return out


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two readings by the processes present in both (a backend
    that exited meanwhile is lost; one that started counts from zero)."""
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


TABLE_STATS = """
SELECT s.relname, s.n_live_tup, s.n_dead_tup, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd,
       s.n_tup_del, s.vacuum_count, s.autovacuum_count, s.analyze_count,
       s.autoanalyze_count, pg_total_relation_size(s.relid), pg_relation_size(s.relid),
       pg_indexes_size(s.relid)
FROM pg_stat_user_tables s WHERE s.schemaname = 'pgqueue' ORDER BY s.relname
"""
TABLE_COLUMNS = (
    "live",
    "dead",
    "ins",
    "upd",
    "hot_upd",
    "del",
    "vacuums",
    "autovacuums",
    "analyzes",
    "autoanalyzes",
    "total_bytes",
    "heap_bytes",
    "index_bytes",
)


def table_stats(conn: Conn) -> dict[str, dict[str, int]]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return {
        row[0]: dict(zip(TABLE_COLUMNS, (int(v) for v in row[1:]), strict=True))
        for row in conn.execute(TABLE_STATS).fetchall()
    }


INDEX_STATS = """
SELECT indexrelname, pg_relation_size(indexrelid), idx_scan, idx_tup_read, idx_tup_fetch
FROM pg_stat_user_indexes WHERE schemaname = 'pgqueue' AND relname = 'runs'
ORDER BY indexrelname
"""


def index_stats(conn: Conn) -> dict[str, dict[str, int]]:
    """Size and scans of each index of pgqueue.runs."""
    return {
        row[0]: dict(zip(("bytes", "scans", "tup_read", "tup_fetch"), row[1:], strict=True))
        for row in conn.execute(INDEX_STATS).fetchall()
    }


def claim_probe(conn: Conn) -> dict[str, float]:
    """EXPLAIN (ANALYZE, BUFFERS) of claim.sql (limit 10) on the soak queue, rolled back:
    median execution ms of 3, and the shared buffers the last one touched."""
    params = {"queue": QUEUE, "limit": 10, "worker_id": uuid.uuid4(), "lease_seconds": 30.0}
    params |= ClaimMarks().start("")  # from the front
    times, buffers, claimed = [], 0, 0
    for _ in range(3):
        with conn.transaction(force_rollback=True):
            row = conn.execute(
                sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + sql.SQL(_sql.query("claim")),
                params,
            ).fetchone()
        assert row is not None
        plan = row[0][0]
        times.append(float(plan["Execution Time"]))
        top = plan["Plan"]
        buffers = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
        claimed = int(top.get("Actual Rows", 0))
    return {"ms": statistics.median(times), "buffers": buffers, "claimed": claimed}


WINDOW = """
SELECT count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - run_at)),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - run_at)),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - run_at)),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - run_at))
FROM pgqueue.runs
WHERE queue = %(queue)s AND state = 'succeeded'
  AND finished_at >= %(t0)s AND finished_at < %(t1)s
"""
# Each count reads a partial index, or (failed) runs_failed_idx: never the history, which
# --history makes millions of rows. The finished history is counted by pg_class below.
DEPTH = """
SELECT (SELECT count(*) FROM pgqueue.runs WHERE state = 'queued'),
       (SELECT count(*) FROM pgqueue.runs WHERE state = 'running'),
       (SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'pgqueue.runs'::regclass),
       (SELECT count(*) FROM pgqueue.runs WHERE state = 'scheduled')
       + (SELECT count(*) FROM pgqueue.runs WHERE state = 'waiting')
       + (SELECT count(*) FROM pgqueue.runs WHERE state = 'failed')
"""

# What operators read while the soak runs (the dashboard's overview, queue page and chart,
# `pgqueue queues`, `pgqueue runs list`): each named query's median of 3, in ms, in a
# transaction as its caller reads it (the summaries with JIT off, sql/no_jit.sql).
READS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "queue_stats": ("queue_stats", {}, True),
    "dashboard overview": ("dashboard_queues", {}, True),
    "dashboard chart": ("dashboard_throughput", {}, True),
    "dashboard queue": ("dashboard_queue", {"queue": QUEUE}, True),
    "pgqueue queues": ("queue_summary", {}, True),
    "runs list": ("list_runs", {"state": None, "queue": None, "task": None, "limit": 20}, False),
    "runs list --state succeeded --queue": (
        "list_runs",
        {"state": "succeeded", "queue": QUEUE, "task": None, "limit": 20},
        False,
    ),
    "runs list --state failed": (
        "list_runs",
        {"state": "failed", "queue": None, "task": None, "limit": 20},
        False,
    ),
}


def read_probes(conn: Conn) -> dict[str, float]:
    out = {}
    for name, (query, params, no_jit) in READS.items():
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            with conn.transaction():
                if no_jit:
                    conn.execute(_sql.query("no_jit"))
                conn.execute(_sql.query(query), params).fetchall()
            times.append(1000 * (time.perf_counter() - t0))
        out[name] = statistics.median(times)
    return out


def load_history(conn: Conn, n: int, keep: str, fillfactor: int | None = None) -> None:
    """n succeeded runs of the soak's queue, finished uniformly over the last `keep`
    (oldest first by id, as real history), then VACUUM ANALYZE. With `fillfactor`,
    runs_pkey is rebuilt with its leaf pages that full, then its fillfactor reset: a run's
    claim and completion each add an entry next to its first (never HOT updates), so the
    pages of history that workers wrote hold about half what a bulk load packs in, and an
    install's history is of that kind (bench/RESULTS.md, "Why runs_pkey grows")."""
    seconds = parse_duration(keep).total_seconds()
    conn.execute(
        """
        INSERT INTO pgqueue.runs (task, queue, state, args, kwargs, attempt, run_at,
                                  started_at, finished_at)
        SELECT 'bench.noop', %(queue)s, 'succeeded', jsonb_build_array(g), '{}'::jsonb, 1,
               t - interval '3 ms', t - interval '2 ms', t
        FROM (SELECT g, now() - (%(n)s - g) * (%(seconds)s * interval '1 second' / %(n)s) AS t
              FROM generate_series(1, %(n)s) g) x
        """,
        {"queue": QUEUE, "n": n, "seconds": seconds},
    )
    if fillfactor is not None:
        conn.execute(
            sql.SQL("ALTER INDEX pgqueue.runs_pkey SET (fillfactor = {})").format(
                sql.Literal(fillfactor)
            )
        )
        conn.execute("REINDEX INDEX pgqueue.runs_pkey")
        conn.execute("ALTER INDEX pgqueue.runs_pkey RESET (fillfactor)")
    vacuum_analyze(conn)


@dataclass
class Sample:
    """One interval."""

    index: int
    seconds: float
    enqueued: int
    completed: int
    queued: int
    running: int
    history: int
    other_states: int
    pickup_p50_ms: float
    pickup_p95_ms: float
    done_p50_ms: float
    enqueue_p95_ms: float
    probe: dict[str, float]
    reads: dict[str, float]
    tables: dict[str, dict[str, int]]
    indexes: dict[str, dict[str, int]]
    deltas: dict[str, dict[str, int]]
    worker_cpu_s: float
    db_cpu_s: float
    machine_busy: float
    pickup_p99_ms: float = float("nan")
    enqueue_p50_ms: float = float("nan")
    enqueue_p99_ms: float = float("nan")
    emulated_vacuums: list[dict[str, Any]] = field(default_factory=list)

    @property
    def per_s(self) -> float:
        return self.completed / self.seconds

    def runs_table(self, key: str) -> int:
        return self.tables.get("runs", {}).get(key, 0)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["per_s"] = self.per_s
        return d


class Sampler:
    def __init__(self, scratch: Scratch, producer: Producer, workers: Sequence[int]) -> None:
        self.scratch = scratch
        self.producer = producer
        self.workers = workers
        self.conn = scratch.connect()
        self.samples: list[Sample] = []
        self.t_db = self._db_now()
        self.t_wall = time.perf_counter()
        self.sent, _ = producer.take()
        self.tables = table_stats(self.conn)
        self.worker_cpu = self._worker_cpu()
        self.db_cpu = backend_cpu(self.conn, scratch.name)
        self.mark = cpu_mark()

    def _db_now(self) -> Any:
        # a second behind: a completion batch stamped just before `now` has committed
        row = self.conn.execute("SELECT clock_timestamp() - interval '1 second'").fetchone()
        assert row is not None
        return row[0]

    def _worker_cpu(self) -> float:
        return sum(proc_cpu(pid) or 0.0 for pid in self.workers)

    def take(self, index: int, vacuums: list[dict[str, Any]]) -> Sample:
        t_db = self._db_now()
        t_wall = time.perf_counter()
        sent, calls = self.producer.take()
        row = self.conn.execute(WINDOW, {"queue": QUEUE, "t0": self.t_db, "t1": t_db}).fetchone()
        depth = self.conn.execute(DEPTH).fetchone()
        assert row is not None and depth is not None
        tables = table_stats(self.conn)
        deltas = {
            name: {k: v - self.tables.get(name, {}).get(k, 0) for k, v in now.items()}
            for name, now in tables.items()
        }
        worker_cpu = self._worker_cpu()
        db_cpu = backend_cpu(self.conn, self.scratch.name)
        sample = Sample(
            index=index,
            seconds=(t_db - self.t_db).total_seconds(),
            enqueued=sent - self.sent,
            completed=int(row[0]),
            queued=int(depth[0]),
            running=int(depth[1]),
            history=int(depth[2]),
            other_states=int(depth[3]),
            pickup_p50_ms=1000 * float(row[1] if row[1] is not None else "nan"),
            pickup_p95_ms=1000 * float(row[2] if row[2] is not None else "nan"),
            done_p50_ms=1000 * float(row[3] if row[3] is not None else "nan"),
            enqueue_p95_ms=1000 * percentile(calls, 95),
            pickup_p99_ms=1000 * float(row[4] if row[4] is not None else "nan"),
            enqueue_p50_ms=1000 * percentile(calls, 50),
            enqueue_p99_ms=1000 * percentile(calls, 99),
            probe=claim_probe(self.conn),
            reads=read_probes(self.conn),
            tables=tables,
            indexes=index_stats(self.conn),
            deltas=deltas,
            worker_cpu_s=worker_cpu - self.worker_cpu,
            db_cpu_s=cpu_delta(self.db_cpu, db_cpu),
            machine_busy=busy_since(self.mark),
            emulated_vacuums=vacuums,
        )
        self.t_db, self.t_wall, self.sent, self.tables = t_db, t_wall, sent, tables
        self.worker_cpu, self.db_cpu, self.mark = worker_cpu, db_cpu, cpu_mark()
        self.samples.append(sample)
        return sample

    def close(self) -> None:
        self.conn.close()


# -- running it ------------------------------------------------------------------------------


@contextlib.contextmanager
def workers(cmd: Sequence[str], procs: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    started = [subprocess.Popen(list(cmd), cwd=ROOT, env=subprocess_env()) for _ in range(procs)]
    try:
        yield started
    finally:
        for w in started:
            if w.poll() is None:
                w.terminate()
        for w in started:
            try:
                w.wait(40)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()


def wait_registered(conn: Conn, procs: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute("SELECT count(*) FROM pgqueue.workers").fetchone()
        if row and row[0] >= procs:
            return
        time.sleep(0.1)
    raise TimeoutError(f"{procs} workers did not register within {timeout}s")


def calibrate(scratch: Scratch, args: argparse.Namespace, log: Any) -> float:
    """Capacity: --procs workers drain --calibrate queued no-op runs (database clock)."""
    dsn = scratch.fresh()
    with scratch.connect() as conn:
        bulk_load(conn, args.calibrate, task="bench.noop", queue=QUEUE)
        vacuum_analyze(conn)
    cmd = worker_command(dsn, QUEUE, args.concurrency, burst=False)
    t0 = time.perf_counter()
    with workers(cmd, args.procs) as started, scratch.connect() as conn:
        while time.perf_counter() - t0 < 300:
            row = conn.execute(
                "SELECT count(*) FROM pgqueue.runs WHERE state = 'succeeded'"
            ).fetchone()
            if (row and row[0] >= args.calibrate) or any(w.poll() is not None for w in started):
                break
            time.sleep(0.1)
    with scratch.connect() as conn:
        row = conn.execute(
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at))"
            " FROM pgqueue.runs WHERE state = 'succeeded'"
        ).fetchone()
    assert row is not None
    done, span = int(row[0]), float(row[1] or 0.0)
    if done < args.calibrate or not span:
        raise RuntimeError(f"calibration: {done} of {args.calibrate} runs succeeded")
    capacity = done / span
    log(f"calibration: {done:,} runs drained at {fmt(capacity)} runs/s ({span:.1f}s)")
    return capacity


def vacuum_mode(scratch: Scratch, wanted: str) -> str:
    if wanted != "auto":
        return wanted
    with scratch.connect() as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
    return "server" if row and row[0] == "on" else "emulate"


def soak(args: argparse.Namespace, command: str, log: Any) -> dict[str, Any]:
    scratch = Scratch(args.server, args.db)
    details: dict[str, Any] = {}
    capacity = None
    if args.rate is None:
        capacity = calibrate(scratch, args, log)
        rate = round(args.load * capacity)
    else:
        rate = args.rate
    details["capacity"] = capacity
    details["rate"] = rate
    dsn = scratch.fresh()
    mode = vacuum_mode(scratch, args.vacuum)
    if args.auto_explain is not None:
        with scratch.connect() as conn:
            db = sql.Identifier(scratch.name)
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET session_preload_libraries = 'auto_explain'").format(
                    db
                )
            )
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET auto_explain.log_min_duration = {}").format(
                    db, sql.Literal(f"{args.auto_explain}ms")
                )
            )
    details["vacuum"] = mode
    if args.history:
        t0 = time.perf_counter()
        with scratch.connect() as conn:
            load_history(conn, args.history, args.keep, args.history_fillfactor)
        log(
            f"history: {args.history:,} finished runs over {args.keep} in"
            f" {time.perf_counter() - t0:.0f} s"
            + (
                f", runs_pkey rebuilt {args.history_fillfactor}% full"
                if args.history_fillfactor
                else ""
            )
        )
    apps.app.configure(dsn=dsn)
    extra = ["--keep-succeeded", args.keep]
    cmd = worker_command(dsn, QUEUE, args.concurrency, burst=False, extra=extra)
    details["worker_command"] = shlex.join(["python", *cmd[1:]]).replace(dsn, "DSN")
    vacuumer = Vacuumer(dsn, args.naptime) if mode == "emulate" else None
    if vacuumer is not None:
        details["emulated_naptime"] = vacuumer.naptime
    log(
        f"soak: {args.minutes} x {args.interval:.0f}s at {fmt(rate)} runs/s"
        + (f" ({args.load:.0%} of {fmt(capacity)})" if capacity else "")
        + f", {args.procs} worker(s) x c={args.concurrency}, --keep-succeeded {args.keep},"
        f" vacuum: {mode}" + (f" (naptime {vacuumer.naptime:.0f}s)" if vacuumer else "")
    )
    producer = Producer(rate, args.tick)
    with workers(cmd, args.procs) as started, scratch.connect() as conn:
        wait_registered(conn, args.procs)
        producer.start()
        if vacuumer is not None:
            vacuumer.start()
        try:
            time.sleep(args.warmup)
            sampler = Sampler(scratch, producer, [w.pid for w in started])
            seen = 0
            t_next = time.perf_counter()
            print_header(log)
            for i in range(1, args.minutes + 1):
                t_next += args.interval
                time.sleep(max(0.0, t_next - time.perf_counter()))
                if producer.error is not None:
                    raise RuntimeError(f"producer failed: {producer.error!r}")
                dead = [w.pid for w in started if w.poll() is not None]
                if dead:
                    raise RuntimeError(f"worker(s) {dead} exited")
                vacuums = vacuumer.log[seen:] if vacuumer else []
                seen += len(vacuums)
                log(row_text(sampler.take(i, vacuums)))
        finally:
            producer.stop()
            if vacuumer is not None:
                vacuumer.stop()
    sampler.close()
    details["samples"] = [s.as_dict() for s in sampler.samples]
    details["emulated_vacuums"] = vacuumer.log if vacuumer else []
    with scratch.connect() as conn:
        row = conn.execute("SELECT count(*) FROM pgqueue.runs WHERE state = 'failed'").fetchone()
        details["failed_runs"] = int(row[0]) if row else 0
    if not args.keep_db:
        scratch.drop()
    return details


# -- report ----------------------------------------------------------------------------------

HEADER = (
    "| min | enqueued | completed | done/s | queued | pickup p50 | p95 | p99 | enqueue p99"
    " | probe ms | probe buf"
    " | runs live | runs dead | runs MB | vacuums | worker CPU | db CPU | machine"
    " | slowest read |"
)


def print_header(log: Any) -> None:
    log(HEADER)
    log("|" + "---|" * (HEADER.count("|") - 1))


def row_text(s: Sample) -> str:
    runs = s.deltas.get("runs", {})
    vacs = runs.get("vacuums", 0) + runs.get("autovacuums", 0)
    per_run = 1e6 / s.completed if s.completed else float("nan")
    cells = [
        str(s.index),
        f"{s.enqueued:,}",
        f"{s.completed:,}",
        fmt(s.per_s),
        f"{s.queued:,}",
        f"{s.pickup_p50_ms:.1f} ms",
        f"{s.pickup_p95_ms:.1f} ms",
        f"{s.pickup_p99_ms:.1f} ms",
        f"{s.enqueue_p99_ms:.1f} ms",
        f"{s.probe['ms']:.2f}",
        f"{s.probe['buffers']:.0f}",
        f"{s.runs_table('live'):,}",
        f"{s.runs_table('dead'):,}",
        f"{s.runs_table('total_bytes') / 2**20:.1f}",
        str(vacs),
        f"{s.worker_cpu_s * per_run:.0f} us/run",
        f"{s.db_cpu_s * per_run:.0f} us/run",
        f"{100 * s.machine_busy:.0f}%",
        slowest_read(s),
    ]
    return "| " + " | ".join(cells) + " |"


def slowest_read(s: Sample) -> str:
    if not s.reads:
        return "-"
    name = max(s.reads, key=lambda k: s.reads[k])
    return f"{s.reads[name]:.0f} ms ({name})"


def change(first: float, last: float) -> float:
    """Percent change from first to last."""
    return 100.0 * (last - first) / first if first else float("nan")


def tables_summary(samples: Sequence[Sample]) -> list[str]:
    first, last = samples[0], samples[-1]
    head = (
        "| table | live (last) | dead (first / max / last) | total size first → last"
        " | ins | upd (HOT %) | del | vacuums | autovacuums |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name in sorted(last.tables):
        t = last.tables[name]
        dead = [s.tables.get(name, {}).get("dead", 0) for s in samples]
        tot = {k: sum(s.deltas.get(name, {}).get(k, 0) for s in samples) for k in TABLE_COLUMNS}
        hot = 100 * tot["hot_upd"] / tot["upd"] if tot["upd"] else 0.0
        size0 = first.tables.get(name, {}).get("total_bytes", 0) / 2**10
        lines.append(
            f"| {name} | {t['live']:,} | {dead[0]:,} / {max(dead):,} / {dead[-1]:,}"
            f" | {size0:,.0f} → {t['total_bytes'] / 2**10:,.0f} kB | {tot['ins']:,}"
            f" | {tot['upd']:,} ({hot:.0f}%) | {tot['del']:,} | {tot['vacuums']}"
            f" | {tot['autovacuums']} |"
        )
    return lines


def figures(samples: Sequence[Sample], command: str, rate: float) -> list[Figure]:
    first, last = samples[0], samples[-1]
    k = max(1, min(FIVE, len(samples) // 2))

    def ends(value: Callable[[Sample], float]) -> tuple[float, float]:
        """The mean of a per-interval value over the first k and the last k intervals."""
        return (
            statistics.fmean(value(s) for s in samples[:k]),
            statistics.fmean(value(s) for s in samples[-k:]),
        )

    def five(
        name: str, value: Callable[[Sample], float], unit: str, higher_is_better: bool
    ) -> Figure:
        a, b = ends(value)
        return fig(
            f"{name}, first {k} → last {k} intervals",
            "%",
            change(a, b),
            target=-ENDS_TARGET if higher_is_better else ENDS_TARGET,
            higher_is_better=higher_is_better,
            note=f"{a:.1f} → {b:.1f} {unit} (mean of the intervals' figures)",
        )

    def fig(name: str, unit: str, value: float, **kw: Any) -> Figure:
        return Figure(name, unit, samples=[value], command=command, **kw)

    per_run = [
        (1e6 * s.worker_cpu_s / s.completed, 1e6 * s.db_cpu_s / s.completed)
        if s.completed
        else (float("nan"), float("nan"))
        for s in samples
    ]
    return [
        five("completed throughput", lambda s: s.per_s, "runs/s", True),
        five("pickup p99", lambda s: s.pickup_p99_ms, "ms", False),
        five("enqueue_many p99", lambda s: s.enqueue_p99_ms, "ms", False),
        fig(f"completed, first interval (enqueued at {fmt(rate)}/s)", "runs/s", first.per_s),
        fig("completed, last interval", "runs/s", last.per_s),
        fig(
            "completed throughput, change first → last",
            "%",
            change(first.per_s, last.per_s),
            target=-DECLINE_TARGET,
            note="decline at most 15% (issue 5)",
        ),
        fig(
            "completed throughput, change best → last (stricter)",
            "%",
            change(max(s.per_s for s in samples), last.per_s),
            target=-DECLINE_TARGET,
            note="the first interval can be the slowest (cold table: no statistics, no vacuum"
            " yet), which flatters first → last",
        ),
        fig(
            "pickup p50, change first → last",
            "%",
            change(first.pickup_p50_ms, last.pickup_p50_ms),
            note=f"{first.pickup_p50_ms:.1f} → {last.pickup_p50_ms:.1f} ms (lowest interval"
            f" {min(s.pickup_p50_ms for s in samples):.1f} ms)",
        ),
        fig(
            "pickup p95, change first → last",
            "%",
            change(first.pickup_p95_ms, last.pickup_p95_ms),
            note=f"{first.pickup_p95_ms:.1f} → {last.pickup_p95_ms:.1f} ms (lowest interval"
            f" {min(s.pickup_p95_ms for s in samples):.1f} ms)",
        ),
        fig(
            "claim probe ms, change first → last",
            "%",
            change(first.probe["ms"], last.probe["ms"]),
            note=f"{first.probe['ms']:.2f} → {last.probe['ms']:.2f} ms, buffers"
            f" {first.probe['buffers']:.0f} → {last.probe['buffers']:.0f}",
        ),
        fig(
            "worker CPU per run, change first → last",
            "%",
            change(per_run[0][0], per_run[-1][0]),
            note=f"{per_run[0][0]:.0f} → {per_run[-1][0]:.0f} us/run",
        ),
        fig(
            "database CPU per run, change first → last",
            "%",
            change(per_run[0][1], per_run[-1][1]),
            note=f"{per_run[0][1]:.0f} → {per_run[-1][1]:.0f} us/run",
        ),
        fig(
            "pgqueue.runs dead tuples, max of intervals",
            "rows",
            float(max(s.runs_table("dead") for s in samples)),
        ),
        fig("pgqueue.runs total size, last interval", "MB", last.runs_table("total_bytes") / 2**20),
        *(
            fig(
                f"read: {name}, worst interval",
                "ms",
                max(s.reads.get(name, 0.0) for s in samples),
                target=READ_TARGET_MS,
                higher_is_better=False,
                note=f"first {first.reads.get(name, 0.0):.1f},"
                f" last {last.reads.get(name, 0.0):.1f} ms",
            )
            for name in READS
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if (args.snapshot or args.snapshot_rev) and not os.environ.get(run.SNAPSHOT_ENV):
        return run.run_in_snapshot(args, argv, module="bench.soak", rev=args.snapshot_rev)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    command = os.environ.get(run.COMMAND_ENV) or "python -m bench.soak " + shlex.join(argv)

    def log(text: str) -> None:
        print(text, flush=True)

    facts = run.machine(args.server)
    log(
        f"machine: nproc={facts['nproc']} ({facts['cpu']}), {facts['postgres'].split(',')[0]},"
        f" pgqueue {facts['pgqueue']} @ {facts['git']}; load average"
        f" {', '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    started = time.time()
    details = soak(args, command, log)
    samples = [Sample(**{k: v for k, v in d.items() if k != "per_s"}) for d in details["samples"]]
    summary = tables_summary(samples)
    log("")
    for line in summary:
        log(line)
    details["tables_summary"] = summary
    details["minutes_table"] = [HEADER] + [row_text(s) for s in samples]
    write_report(
        args.out,
        time.strftime("soak-%Y%m%d-%H%M%S", time.localtime(started)),
        command=command,
        machine=facts,
        started=started,
        figures=figures(samples, command, details["rate"]),
        details=details,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
