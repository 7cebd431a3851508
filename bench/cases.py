"""The benchmarks. Each one takes a Scratch database and a repeat count and returns Figures
(one sample per repeat); every repeat starts from a freshly created and migrated database.
"""

from __future__ import annotations

import random
import re
import resource
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row

from bench import apps
from bench.common import (
    ROOT,
    Conn,
    Figure,
    Scratch,
    bulk_load,
    busy_since,
    cpu_mark,
    dbname_of,
    fmt,
    percentile,
    running,
    subprocess_env,
    vacuum_analyze,
    wait_for_listener,
    worker_command,
)
from bench.raw_listener import CHANNEL as RAW_CHANNEL
from pgqueue.db import sql as _sql
from pgqueue.worker.records import Outcome
from pgqueue.worker.semaphores import ClaimMarks

try:  # a core from before completions were one jsonb document (bench --snapshot-rev)
    from pgqueue.worker._completer import complete_params
except ImportError:  # pragma: no cover
    complete_params = None  # type: ignore[assignment]

Log = Callable[[str], None]


@dataclass
class Context:
    scratch: Scratch
    repeat: int
    command: str
    log: Log = print
    details: dict[str, Any] = field(default_factory=dict)


def _use_app(dsn: str) -> None:
    apps.app.configure(dsn=dsn)


# -- enqueue ---------------------------------------------------------------------------------


class Timed:
    """Accumulates the time spent in interleaved blocks of one contender."""

    def __init__(self) -> None:
        self.spent = 0.0
        self.count = 0

    def run(self, fn: Callable[[], int]) -> None:
        t0 = time.perf_counter()
        self.count += fn()
        self.spent += time.perf_counter() - t0

    @property
    def rate(self) -> float:
        return self.count / self.spent


def _interleave(contenders: Sequence[tuple[Timed, Callable[[], int]]], rounds: int) -> None:
    """Run the contenders' blocks in turns (order alternating each round), so that the
    machine's noise lands on all of them alike."""
    for i in range(rounds):
        order = contenders if i % 2 == 0 else list(reversed(contenders))
        for timed, fn in order:
            timed.run(fn)


def enqueue_bulk(ctx: Context, *, batches: int = 100, batch: int = 1000) -> list[Figure]:
    """task.enqueue_many(items) with `batch` items per call, from one thread (the App's
    pool then uses one connection). Baseline: COPY of rows of the same shape on one
    psycopg connection, batch by batch. The two alternate batch by batch into the same
    table, so table growth and machine noise hit both alike."""
    fig = Figure(
        f"enqueue_many ({batches} x {batch:,} runs)",
        "runs/s",
        target=80_000,
        baseline="COPY of the same rows",
        command=ctx.command,
    )
    copy_fig = Figure("  baseline: COPY, same batches", "runs/s", command=ctx.command)
    items: list[tuple[int]] = [(i,) for i in range(batch)]
    rows = [("bench.noop", "bench", f"[{i}]", "{}") for i in range(batch)]
    for r in range(ctx.repeat):
        dsn = ctx.scratch.fresh()
        _use_app(dsn)
        with ctx.scratch.connect() as conn:

            def many() -> int:
                return len(apps.noop.enqueue_many(items))

            def copy() -> int:
                stmt = "COPY pgqueue.runs (task, queue, args, kwargs) FROM STDIN"
                with conn.cursor() as cur, cur.copy(stmt) as cp:
                    for row in rows:
                        cp.write_row(row)
                return len(rows)

            for _ in range(5):  # warm-up: pool connection, prepared statement
                many()
                copy()
            subject, baseline = Timed(), Timed()
            _interleave([(subject, many), (baseline, copy)], batches)
        apps.app.close()
        fig.samples.append(subject.rate)
        copy_fig.samples.append(baseline.rate)
        fig.ratios.append(subject.rate / baseline.rate)
        ctx.log(
            f"  enqueue_many repeat {r + 1}: {fmt(subject.rate)} runs/s (COPY {fmt(baseline.rate)})"
        )
    return [fig, copy_fig]


RAW_INSERT = (
    "INSERT INTO pgqueue.runs (task, queue, args) VALUES ('bench.noop', 'bench', %s::jsonb)"
    " RETURNING id"
)


def enqueue_single(ctx: Context, *, n: int = 3000, block: int = 100) -> list[Figure]:
    """task.enqueue(i) n times, each in its own transaction (autocommit; the App's pool,
    used from one thread, hands out one connection). Baseline: a raw INSERT ... RETURNING
    id per transaction on one psycopg connection. Reference: the same raw INSERT with
    synchronous_commit=off for that session only (the server's setting is untouched), to
    show how much of a commit is the WAL flush. The three alternate in blocks of `block`."""
    fig = Figure(
        f"enqueue, 1 run per transaction ({n:,})",
        "runs/s",
        target=2_500,
        baseline="raw INSERT..RETURNING, autocommit",
        command=ctx.command,
    )
    raw_fig = Figure("  baseline: raw INSERT per transaction", "runs/s", command=ctx.command)
    async_fig = Figure(
        "  reference: raw INSERT, synchronous_commit=off (session)", "runs/s", command=ctx.command
    )
    for r in range(ctx.repeat):
        dsn = ctx.scratch.fresh()
        _use_app(dsn)
        with ctx.scratch.connect() as raw, ctx.scratch.connect() as nosync:
            nosync.execute("SET synchronous_commit = off")

            def enqueue() -> int:
                for i in range(block):
                    apps.noop.enqueue(i)
                return block

            def insert(conn: Conn) -> int:
                for i in range(block):
                    conn.execute(RAW_INSERT, (f"[{i}]",)).fetchone()
                return block

            for _ in range(1):  # warm-up: pool, prepared statements
                enqueue()
                insert(raw)
                insert(nosync)
            subject, baseline, reference = Timed(), Timed(), Timed()
            _interleave(
                [
                    (subject, enqueue),
                    (baseline, lambda: insert(raw)),
                    (reference, lambda: insert(nosync)),
                ],
                max(1, n // block),
            )
        apps.app.close()
        fig.samples.append(subject.rate)
        raw_fig.samples.append(baseline.rate)
        async_fig.samples.append(reference.rate)
        fig.ratios.append(subject.rate / baseline.rate)
        ctx.log(
            f"  enqueue repeat {r + 1}: {fmt(subject.rate)} runs/s (raw {fmt(baseline.rate)},"
            f" raw without commit flush {fmt(reference.rate)})"
        )
    return [fig, raw_fig, async_fig]


# -- processing ------------------------------------------------------------------------------


def _drain_sql_only(conn: Conn, queue: str, limit: int) -> float:
    """Claim and complete every queued run of `queue` with pgqueue's own claim.sql and
    complete.sql, sequentially on one connection, running nothing. Returns runs/s."""
    worker_id = uuid.uuid4()
    claim, complete = _sql.query("claim"), _sql.query("complete")
    params = {
        "queue": queue,
        "limit": limit,
        "worker_id": worker_id,
        "lease_seconds": 30.0,
        **ClaimMarks().start(""),  # from the front
    }
    done = 0
    t0 = time.perf_counter()
    while True:
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(claim, params).fetchall()
        if not rows:
            break
        done += len(rows)
        conn.execute(complete, _outcomes(rows, worker_id)).fetchall()
    return done / (time.perf_counter() - t0)


def _outcomes(rows: Sequence[dict[str, Any]], worker_id: uuid.UUID) -> dict[str, Any]:
    """complete.sql's parameters for `rows` (claim.sql output) all succeeding, built as the
    worker's completer builds them: with its complete_params when the core has it (one
    jsonb document), else as arrays named by the query (parameters Outcome lacks, as the
    core evolves, are passed as NULLs)."""
    outcomes = [Outcome(row["id"], row["lease_token"], "succeeded", result="null") for row in rows]
    if complete_params is not None:
        return complete_params(outcomes, worker_id)
    params: dict[str, Any] = {"worker_id": worker_id}
    for name in re.findall(r"%\((\w+)\)s", _sql.query("complete")):
        if name not in params:
            params[name] = [getattr(o, name, None) for o in outcomes]
    return params


def process(
    ctx: Context,
    *,
    n: int = 50_000,
    concurrencies: Sequence[int] = (10, 100, 500),
    kinds: Sequence[str] = ("sync", "async"),
    background: int = 0,
) -> list[Figure]:
    """One worker process (`python -m pgqueue worker --burst`) drains n queued no-op runs.

    Throughput = n / (max(finished_at) - min(started_at)), database clock: from the first
    claim to the last completion, without interpreter start-up. The wall clock from spawn
    to exit is reported beside it. Baseline: claim.sql + complete.sql in a loop on one
    connection (batch 100), the SQL alone with no worker around it.
    `background`: also bulk-load that many queued runs of another queue first.
    """
    figs: dict[tuple[str, int], Figure] = {}
    walls: dict[tuple[str, int], list[float]] = {}
    batches: dict[tuple[str, int], list[tuple[float, float]]] = {}
    cpu: dict[tuple[str, int], list[float]] = {}
    extra = f", +{background:,} in other queue" if background else ""
    for kind in kinds:
        for c in concurrencies:
            figs[kind, c] = Figure(
                f"process {n:,} no-op ({kind}), concurrency {c}{extra}",
                "runs/s",
                target=8_000,
                baseline="SQL-only claim+complete loop",
                command=ctx.command,
            )
            walls[kind, c] = []
            batches[kind, c] = []
            cpu[kind, c] = []
    sql_fig = Figure(
        "  baseline: SQL-only claim+complete, batch 100", "runs/s", command=ctx.command
    )
    for r in range(ctx.repeat):
        dsn = ctx.scratch.fresh()
        with ctx.scratch.connect() as conn:
            _load_process(conn, n, "sync", background)
            sql_rate = _drain_sql_only(conn, apps.QUEUES["sync"], 100)
        sql_fig.samples.append(sql_rate)
        ctx.log(f"  SQL-only drain repeat {r + 1}: {fmt(sql_rate)} runs/s")
        configs = [(k, c) for k in kinds for c in concurrencies]
        random.Random(r).shuffle(configs)  # no config always runs first (or last)
        for kind, c in configs:
            dsn = ctx.scratch.fresh()
            with ctx.scratch.connect() as conn:
                _load_process(conn, n, kind, background)
            cpu0 = _children_cpu()
            busy0 = cpu_mark()
            t0 = time.perf_counter()
            proc = subprocess.run(
                worker_command(dsn, apps.QUEUES[kind], c, burst=True),
                cwd=ROOT,
                env=subprocess_env(),
                check=False,
            )
            wall = time.perf_counter() - t0
            worker_cpu = _children_cpu() - cpu0
            busy = busy_since(busy0)
            if proc.returncode != 0:
                raise RuntimeError(f"worker exited with {proc.returncode}")
            with ctx.scratch.connect() as conn:
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*),"
                    " extract(epoch FROM max(finished_at) - min(started_at)),"
                    " count(DISTINCT started_at), count(DISTINCT finished_at)"
                    " FROM pgqueue.runs WHERE queue = %s",
                    (apps.QUEUES[kind],),
                ).fetchone()
            assert row is not None
            ok, total, span = int(row[0]), int(row[1]), float(row[2])
            # one claim (one completion batch) = one transaction = one now(): the number
            # of distinct timestamps counts the statements that claimed (completed) runs
            claims, completions = int(row[3]), int(row[4])
            if ok != n or total != n:
                raise RuntimeError(f"{kind} c={c}: {ok}/{total} succeeded, expected {n}")
            rate = n / span
            figs[kind, c].samples.append(rate)
            figs[kind, c].ratios.append(rate / sql_rate)
            walls[kind, c].append(n / wall)
            batches[kind, c].append((n / claims, n / completions))
            cpu[kind, c].append(1e6 * worker_cpu / n)
            ctx.log(
                f"  process {kind} c={c} repeat {r + 1}: {fmt(rate)} runs/s "
                f"(db span {span:.2f}s; wall {wall:.2f}s = {fmt(n / wall)} runs/s; "
                f"{claims} claims of {n / claims:.1f} runs, {completions} completion "
                f"batches of {n / completions:.1f}; worker CPU {1e6 * worker_cpu / n:.0f} us/run;"
                f" machine {100 * busy:.0f}% busy over {wall:.1f}s)"
            )
    for key, fig in figs.items():
        w = sorted(walls[key])
        claim_b = statistics.median(b[0] for b in batches[key])
        done_b = statistics.median(b[1] for b in batches[key])
        fig.note = (
            f"wall clock incl. start-up: median {fmt(w[len(w) // 2])} runs/s; runs per claim "
            f"{claim_b:.1f}, per completion batch {done_b:.1f}; worker process CPU "
            f"{statistics.median(cpu[key]):.0f} us/run (user+sys, incl. start-up)"
        )
    ctx.details["process_wall"] = {f"{k}-{c}": v for (k, c), v in walls.items()}
    ctx.details["process_cpu_us_per_run"] = {f"{k}-{c}": v for (k, c), v in cpu.items()}
    ctx.details["process_batches"] = {f"{k}-{c}": v for (k, c), v in batches.items()}
    return [*figs.values(), sql_fig]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load_process(conn: Conn, n: int, kind: str, background: int) -> None:
    if background:
        bulk_load(conn, background, queue=apps.OTHER_QUEUE)
    task = apps.TASKS[kind].name
    bulk_load(conn, n, task=task, queue=apps.QUEUES[kind])
    vacuum_analyze(conn)


# -- pickup latency --------------------------------------------------------------------------


def pickup(ctx: Context, *, n: int = 400, warmup: int = 10, concurrency: int = 10) -> list[Figure]:
    """An idle worker process (`python -m pgqueue worker`, LISTENing); this process enqueues
    one run at a time (task.enqueue, own transaction) every 15-35 ms.

    Latency per run (the target's figure): started_at - created_at, both on the database
    clock (created_at is the enqueue statement's start, started_at the claim's): it covers
    the insert, its commit (WAL flush), the NOTIFY delivery, the worker's wake-up and its
    claim statement. Also reported: started_at - the moment task.enqueue() returned in
    this process (same host, same clock), i.e. the worker's share once the commit is done,
    and the enqueue call's own duration. The first `warmup` runs are not counted.
    Baseline: bench.raw_listener (LISTEN + one UPDATE per notification), same measures."""
    figs = {
        "p50": Figure(
            f"idle pickup p50 ({n} runs, db clock)",
            "ms",
            target=3.0,
            higher_is_better=False,
            baseline="raw LISTEN+UPDATE p50",
            command=ctx.command,
        ),
        "p99": Figure(
            f"idle pickup p99 ({n} runs, db clock)",
            "ms",
            target=5.0,
            higher_is_better=False,
            baseline="raw LISTEN+UPDATE p99",
            command=ctx.command,
        ),
        "raw50": Figure(
            "  baseline: raw LISTEN+UPDATE p50", "ms", higher_is_better=False, command=ctx.command
        ),
        "raw99": Figure(
            "  baseline: raw LISTEN+UPDATE p99", "ms", higher_is_better=False, command=ctx.command
        ),
        "after50": Figure(
            "  pickup after enqueue() returned, p50",
            "ms",
            higher_is_better=False,
            baseline="raw, same measure",
            command=ctx.command,
        ),
        "after99": Figure(
            "  pickup after enqueue() returned, p99",
            "ms",
            higher_is_better=False,
            baseline="raw, same measure",
            command=ctx.command,
        ),
    }
    maxima: list[float] = []
    calls: list[tuple[float, float]] = []
    for r in range(ctx.repeat):
        dsn = ctx.scratch.fresh()
        dbname = dbname_of(dsn)
        _use_app(dsn)
        queue = apps.QUEUES["sync"]
        with ctx.scratch.connect() as conn:
            with running(worker_command(dsn, queue, concurrency, burst=False)):
                wait_for_listener(conn, dbname)
                time.sleep(1.0)
                sent = _trickle(lambda i: apps.noop.enqueue(i).id, n + warmup, r)
                _wait_started(conn, queue, n + warmup)
            ours = _latencies(conn, sent, warmup)
            apps.app.close()

            def raw_enqueue(i: int) -> int:
                row = conn.execute(
                    "WITH i AS (INSERT INTO pgqueue.runs (task, queue, args)"
                    " VALUES ('raw', 'raw', %s::jsonb) RETURNING id)"
                    " SELECT id, pg_notify(%s, id::text) FROM i",
                    (f"[{i}]", RAW_CHANNEL),
                ).fetchone()
                assert row is not None
                return int(row[0])

            with running([_python(), "-m", "bench.raw_listener", dsn]):
                wait_for_listener(conn, dbname, RAW_CHANNEL)
                time.sleep(1.0)
                raw_sent = _trickle(raw_enqueue, n + warmup, r)
                _wait_started(conn, "raw", n + warmup)
            raw = _latencies(conn, raw_sent, warmup)
        lat, after, call = ours
        raw_lat, raw_after, _ = raw
        figs["p50"].samples.append(percentile(lat, 50))
        figs["p99"].samples.append(percentile(lat, 99))
        figs["raw50"].samples.append(percentile(raw_lat, 50))
        figs["raw99"].samples.append(percentile(raw_lat, 99))
        figs["after50"].samples.append(percentile(after, 50))
        figs["after99"].samples.append(percentile(after, 99))
        figs["p50"].ratios.append(figs["p50"].samples[-1] / figs["raw50"].samples[-1])
        figs["p99"].ratios.append(figs["p99"].samples[-1] / figs["raw99"].samples[-1])
        figs["after50"].ratios.append(figs["after50"].samples[-1] / percentile(raw_after, 50))
        figs["after99"].ratios.append(figs["after99"].samples[-1] / percentile(raw_after, 99))
        maxima.append(max(lat))
        calls.append((percentile(call, 50), percentile(call, 99)))
        ctx.log(
            f"  pickup repeat {r + 1}: p50 {lat_fmt(lat, 50)} p90 {lat_fmt(lat, 90)} "
            f"p99 {lat_fmt(lat, 99)} max {max(lat):.2f} ms; after enqueue() returned p50 "
            f"{lat_fmt(after, 50)} p99 {lat_fmt(after, 99)}; enqueue() call p50 "
            f"{lat_fmt(call, 50)} p99 {lat_fmt(call, 99)}; raw p50 {lat_fmt(raw_lat, 50)} "
            f"p99 {lat_fmt(raw_lat, 99)} ms"
        )
        for key, values in (
            ("pickup_ms", lat),
            ("pickup_after_return_ms", after),
            ("enqueue_call_ms", call),
            ("raw_pickup_ms", raw_lat),
            ("raw_pickup_after_return_ms", raw_after),
        ):
            ctx.details.setdefault(key, []).append(values)
    figs["p99"].note = "max per repeat: " + ", ".join(f"{m:.1f}" for m in maxima) + " ms"
    figs["p50"].note = (
        "task.enqueue() call (insert + commit), p50 / p99: "
        + ", ".join(f"{a:.2f} / {b:.2f}" for a, b in calls)
        + " ms"
    )
    return list(figs.values())


def _trickle(enqueue: Callable[[int], int], n: int, seed: int) -> dict[int, tuple[float, float]]:
    """Enqueue n runs one at a time, 15-35 ms apart; run id -> (call start, call end) on
    the wall clock."""
    rng = random.Random(seed)
    sent = {}
    for i in range(n):
        t0 = time.time()
        run_id = enqueue(i)
        sent[run_id] = (t0, time.time())
        time.sleep(rng.uniform(0.015, 0.035))
    return sent


def _latencies(
    conn: Conn, sent: dict[int, tuple[float, float]], warmup: int
) -> tuple[list[float], list[float], list[float]]:
    """(started_at - created_at, started_at - enqueue() return, enqueue() duration) in
    ms, in enqueue order, without the first `warmup` runs."""
    rows = conn.execute(
        "SELECT id, extract(epoch FROM started_at)::float8,"
        " extract(epoch FROM started_at - created_at)::float8"
        " FROM pgqueue.runs WHERE id = ANY(%s) ORDER BY id",
        (list(sent),),
    ).fetchall()
    rows = rows[warmup:]
    db = [1000 * row[2] for row in rows]
    after = [1000 * (row[1] - sent[row[0]][1]) for row in rows]
    call = [1000 * (sent[row[0]][1] - sent[row[0]][0]) for row in rows]
    return db, after, call


def lat_fmt(values: Sequence[float], q: float) -> str:
    return f"{percentile(values, q):.2f}"


def _python() -> str:
    import sys

    return sys.executable


def _wait_started(conn: Conn, queue: str, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM pgqueue.runs WHERE queue = %s AND started_at IS NOT NULL",
            (queue,),
        ).fetchone()
        if row and row[0] >= n:
            return
        time.sleep(0.05)
    raise TimeoutError(f"only some of {n} runs of {queue} started within {timeout}s")


# -- claim under load ------------------------------------------------------------------------

# scenario -> (label with {n} for the background size, bulk_load options; None: no rows)
SCENARIOS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "empty": ("no other rows", None),
    "other_queue": ("{n} queued in another queue", {"queue": apps.OTHER_QUEUE}),
    "future": (
        "{n} scheduled (+1 day) in the same queue",
        {"state": "scheduled", "run_at": "now() + interval '1 day'"},
    ),
    "history": ("{n} succeeded in the same queue", {"state": "succeeded"}),
}


def _count(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else f"{n:,}"


@dataclass
class ClaimLoop:
    """Claims `limit` runs with claim.sql and completes them with complete.sql, as a
    worker does (psycopg prepares both after 5 uses); only claim time is counted."""

    conn: Conn
    limit: int
    worker_id: uuid.UUID = field(default_factory=uuid.uuid4)
    claimed: int = 0
    spent: float = 0.0
    latencies: list[float] = field(default_factory=list)

    def step(self, cycles: int) -> bool:
        """Run up to `cycles` claim+complete cycles; False once the queue is drained."""
        params = {
            "queue": apps.SYNC_QUEUE,
            "limit": self.limit,
            "worker_id": self.worker_id,
            "lease_seconds": 30.0,
            **ClaimMarks().start(""),  # from the front
        }
        claim_q, complete_q = _sql.query("claim"), _sql.query("complete")
        for _ in range(cycles):
            t0 = time.perf_counter()
            with self.conn.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(claim_q, params).fetchall()
            took = time.perf_counter() - t0
            if not rows:
                return False
            self.spent += took
            self.latencies.append(took)
            self.claimed += len(rows)
            self.conn.execute(complete_q, _outcomes(rows, self.worker_id)).fetchall()
        return True

    def plan_counts(self) -> dict[str, tuple[int, int]]:
        """(generic, custom) plans used by this session's prepared claim and complete."""
        rows = self.conn.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
        ).fetchall()
        out = {}
        for text, generic, custom in rows:
            for name in ("claim", "complete"):
                if text.strip() == _positional_psycopg(_sql.query(name)).strip():
                    out[name] = (int(generic), int(custom))
        return out


def _positional_psycopg(query: str) -> str:
    """The text psycopg sends for a query with %(name)s placeholders ($1, $2, ...)."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", query)))
    for i, name in enumerate(names, 1):
        query = query.replace(f"%({name})s", f"${i}")
    return query


def claim(
    ctx: Context,
    *,
    background: int = 500_000,
    n: int = 20_000,
    limit: int = 10,
    scenarios: Sequence[str] = ("empty", "other_queue", "future", "history"),
    chunk: int = 25,
) -> list[Figure]:
    """claim.sql alone, as the worker runs it: claim `limit` runs, complete them, repeat
    until the n queued runs of the scenario's database are drained. Throughput = runs
    claimed / time spent in claim statements (completions excluded).

    Every scenario gets its own database, all loaded at once (background rows with
    INSERT ... SELECT generate_series, then the n target runs, then VACUUM ANALYZE since
    autovacuum is off on this server), and the loops advance in turns of `chunk` claims,
    so machine noise hits all scenarios alike and the ratio to `empty` is fair."""
    size = _count(background)
    abs_figs = {
        s: Figure(
            f"claim x{limit}, {SCENARIOS[s][0].format(n=size)}", "runs/s", command=ctx.command
        )
        for s in scenarios
    }
    ratio_figs = {
        s: Figure(
            f"claim ratio: {SCENARIOS[s][0].format(n=size)} / empty",
            "x empty",
            target=0.85,
            command=ctx.command,
        )
        for s in scenarios
        if s != "empty"
    }
    p50: dict[str, list[float]] = {s: [] for s in scenarios}
    for r in range(ctx.repeat):
        scratches = {s: Scratch(ctx.scratch.server, f"{ctx.scratch.name}_{s}") for s in scenarios}
        conns: dict[str, Conn] = {}
        try:
            loops: dict[str, ClaimLoop] = {}
            for s, scratch in scratches.items():
                scratch.fresh()
                conn = conns[s] = scratch.connect()
                extra = SCENARIOS[s][1]
                if extra is not None:
                    bulk_load(conn, background, **extra)
                bulk_load(conn, n)
                vacuum_analyze(conn)
                if r == 0:
                    ctx.details[f"explain_{s}"] = explain_hot_queries(conn, limit)
                loops[s] = ClaimLoop(conn, limit)
            active = list(scenarios)
            random.Random(r).shuffle(active)
            while active:
                for s in list(active):
                    if not loops[s].step(chunk):
                        active.remove(s)
            for s, loop in loops.items():
                rate = loop.claimed / loop.spent
                abs_figs[s].samples.append(rate)
                p50[s].append(1000 * percentile(loop.latencies, 50))
                ctx.details.setdefault(f"claim_plans_{s}", []).append(loop.plan_counts())
                ctx.log(
                    f"  claim {s} repeat {r + 1}: {fmt(rate)} runs/s, p50 "
                    f"{p50[s][-1]:.3f} ms/claim, plans (generic, custom) {loop.plan_counts()}"
                )
            for s, fig in ratio_figs.items():
                fig.samples.append(abs_figs[s].samples[-1] / abs_figs["empty"].samples[-1])
        finally:
            for conn in conns.values():
                conn.close()
            for scratch in scratches.values():
                scratch.drop()
    for s, fig in abs_figs.items():
        fig.note = f"median claim latency {statistics.median(p50[s]):.3f} ms"
    return [*abs_figs.values(), *ratio_figs.values()]


# psycopg cannot infer these from claim.sql's text alone when PREPAREd by hand
PARAM_TYPES = {
    "queue": "text",
    "limit": "bigint",
    "worker_id": "uuid",
    "lease_seconds": "float8",
    "after_priority": "smallint",
    "after_id": "bigint",
}


def explain_prepared(conn: Conn, query: str, params: dict[str, Any], mode: str) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of `query` PREPAREd and EXECUTEd under plan_cache_mode
    `mode` (force_custom_plan / force_generic_plan). Call inside a transaction that is
    rolled back."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", query)))
    text = query
    for i, name in enumerate(names, 1):
        cast = f"::{PARAM_TYPES[name]}" if name in PARAM_TYPES else ""
        text = re.sub(rf"%\({name}\)s(?!::)", f"${i}{cast}", text)
        text = text.replace(f"%({name})s", f"${i}")
    conn.execute(sql.SQL("SET LOCAL plan_cache_mode = {}").format(sql.Identifier(mode)))
    conn.execute("PREPARE bench_stmt AS " + text)
    stmt = sql.SQL(
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY ON) EXECUTE bench_stmt({})"
    ).format(sql.SQL(", ").join(sql.Literal(params[name]) for name in names))
    rows = conn.execute(stmt).fetchall()
    conn.execute("DEALLOCATE bench_stmt")
    return f"-- {mode}\n" + "\n".join(row[0] for row in rows)


def explain_hot_queries(conn: Conn, limit: int) -> str:
    """claim.sql and complete.sql (for the runs just claimed), custom and generic plans;
    everything rolled back."""
    out = []
    worker_id = uuid.uuid4()
    params = {
        "queue": apps.SYNC_QUEUE,
        "limit": limit,
        "worker_id": worker_id,
        "lease_seconds": 30.0,
        **ClaimMarks().start(""),  # from the front
    }
    for mode in ("force_custom_plan", "force_generic_plan"):
        with conn.transaction(force_rollback=True):
            out.append("== claim.sql " + explain_prepared(conn, _sql.query("claim"), params, mode))
        with conn.transaction(force_rollback=True), conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(_sql.query("claim"), params).fetchall()
            done = _outcomes(rows, worker_id)
            out.append(
                "== complete.sql " + explain_prepared(conn, _sql.query("complete"), done, mode)
            )
    return "\n\n".join(out)
