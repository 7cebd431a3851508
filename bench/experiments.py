"""A/B experiments behind the decisions in bench/RESULTS.md: each one measures the current
core against a variant written here (the core is not modified), interleaved in the same
database so that machine noise hits both sides alike.

    python -m bench.experiments all
    python -m bench.experiments claim-any claim-commit drain-pipeline server-cpu \
        completion-running claim-walk limited-walk drain-monitor enqueue-jsonb group-index \
        fillfactor index-cost claim-tid wal-records pickup-split \
        enqueue-plain pool-turns startup python-costs
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import threading
import time
import timeit
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench import apps
from bench.cases import _outcomes, explain_prepared
from bench.common import (
    DEFAULT_SERVER,
    ROOT,
    Conn,
    Scratch,
    bulk_load,
    percentile,
    subprocess_env,
    vacuum_analyze,
    worker_command,
)
from pgqueue import _sql, tasks
from pgqueue._inserts import _statement
from pgqueue.worker._claimed import Claimed, claimed_row
from pgqueue.worker._completer import Outcome, complete_params
from pgqueue.worker.semaphores import FROM_FRONT, FRONT_EVERY, ClaimMarks

# -- claim: join the picked CTE, or = ANY(ARRAY(...)) ------------------------------------------

CLAIM_JOIN = "  FROM picked\n WHERE r.id = picked.id"
CLAIM_ANY = " WHERE r.id = ANY (ARRAY(SELECT id FROM picked))"


def claim_any_variant() -> str:
    query = _sql.query("claim")
    if CLAIM_JOIN not in query:
        raise RuntimeError("claim.sql changed shape: update bench/experiments.py")
    return query.replace(CLAIM_JOIN, CLAIM_ANY)


@dataclass
class Latencies:
    values: list[float] = field(default_factory=list)

    def p(self, q: float) -> float:
        ordered = sorted(self.values)
        return 1000 * ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def _claim_cycle(conn: Conn, query: str, params: dict[str, Any], out: Latencies) -> int:
    t0 = time.perf_counter()
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query, params).fetchall()
    out.values.append(time.perf_counter() - t0)
    if rows:
        conn.execute(_sql.query("complete"), _outcomes(rows, params["worker_id"])).fetchall()
    return len(rows)


def claim_any(scratch: Scratch, background: int = 500_000, claims: int = 3000) -> None:
    """claim.sql vs the same statement with `WHERE r.id = ANY (ARRAY(SELECT id FROM
    picked))` instead of joining the CTE: plans (custom/generic) and claim latency; and
    that variant with plan_cache_mode=force_generic_plan on its session (no re-planning
    per claim), which is only safe because its generic plan is good."""
    print(f"== claim-any: {background:,} queued in another queue, LIMIT 10")
    scratch.fresh()
    variant = claim_any_variant()
    sides = {
        "claim.sql": _sql.query("claim"),
        "ANY(ARRAY)": variant,
        "ANY(ARRAY), generic": variant,
    }
    conns = {name: scratch.connect() for name in sides}
    try:
        a = conns["claim.sql"]
        conns["ANY(ARRAY), generic"].execute("SET plan_cache_mode = force_generic_plan")
        bulk_load(a, background, queue=apps.OTHER_QUEUE)
        bulk_load(a, claims * 10 * len(sides) + 1000)
        vacuum_analyze(a)
        params = {"queue": "bench", "limit": 10, "worker_id": uuid.uuid4(), "lease_seconds": 30.0}
        params |= FROM_FRONT
        for name, query in list(sides.items())[:2]:
            for mode in ("force_custom_plan", "force_generic_plan"):
                with a.transaction(force_rollback=True):
                    text = explain_prepared(a, query, params, mode)
                keep = [
                    line.strip()
                    for line in text.splitlines()
                    if "Time:" in line or "Seq Scan" in line or "Hash Join" in line
                ]
                print(f"  {name:20s} {mode:19s} {'; '.join(keep)}")
        lat = {name: Latencies() for name in sides}
        names = list(sides)
        for i in range(claims // 50):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                for _ in range(50):
                    _claim_cycle(conns[name], sides[name], params, lat[name])
        for name, conn in conns.items():
            plans = conn.execute(
                "SELECT sum(generic_plans), sum(custom_plans) FROM pg_prepared_statements"
                " WHERE statement LIKE '%%FOR UPDATE SKIP LOCKED%%'"
            ).fetchone()
            values = Latencies(lat[name].values[10:])
            print(
                f"  {name:20s} p50 {values.p(50):.3f} ms  p90 {values.p(90):.3f} ms  mean "
                f"{1000 * statistics.mean(values.values):.3f} ms  (generic, custom) plans "
                f"({plans[0] if plans else '?'}, {plans[1] if plans else '?'})"
            )
    finally:
        for conn in conns.values():
            conn.close()
        scratch.drop()


# -- claim: asynchronous commit or not ---------------------------------------------------------

ASYNC_COMMIT = "\n   AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL"


def claim_commit(scratch: Scratch, claims: int = 2000, limit: int = 1) -> None:
    """claim.sql (commits asynchronously) vs the same statement without its
    set_config('synchronous_commit', 'off', true): the claim's round trip, which is what a
    pickup waits for, interleaved on two connections (each claimed run is completed)."""
    print(f"== claim-commit: {claims:,} claims of {limit}, each side")
    scratch.fresh()
    sides = {"claim.sql (async commit)": _sql.query("claim")}
    sides["synchronous commit"] = sides["claim.sql (async commit)"].replace(ASYNC_COMMIT, "")
    assert sides["synchronous commit"] != sides["claim.sql (async commit)"]
    conns = {name: scratch.connect() for name in sides}
    try:
        a = next(iter(conns.values()))
        bulk_load(a, claims * limit * len(sides) + 1000)
        vacuum_analyze(a)
        params = {"queue": "bench", "limit": limit, "worker_id": uuid.uuid4(), "lease_seconds": 30}
        params |= FROM_FRONT
        lat = {name: Latencies() for name in sides}
        for i in range(claims):
            for name in sides if i % 2 else reversed(sides):
                _claim_cycle(conns[name], sides[name], params, lat[name])
        for name in sides:
            values = Latencies(lat[name].values[50:])
            print(
                f"  {name:26s} p50 {values.p(50):.3f} ms  p95 {values.p(95):.3f} ms"
                f"  p99 {values.p(99):.3f} ms"
            )
    finally:
        for conn in conns.values():
            conn.close()
        scratch.drop()


# -- drain: claim then complete, or both in one round trip -----------------------------------


def drain_pipeline(scratch: Scratch, n: int = 30_000, batches: Sequence[int] = (10, 100)) -> None:
    """The SQL a worker needs per batch, on one connection: claim.sql then complete.sql
    one after the other (what the worker's loop amounts to for no-op tasks), against
    completing batch k and claiming batch k+1 in the same round trip (psycopg pipeline
    mode), which is what overlapping claims and completions would buy."""
    print(f"== drain-pipeline: {n:,} runs per side")
    for batch in batches:
        scratch.fresh()
        with scratch.connect() as a, scratch.connect() as b:
            bulk_load(a, n, queue="seq")
            bulk_load(a, n, queue="pipe")
            vacuum_analyze(a)
            seq, pipe = _Drain(a, "seq", batch), _Drain(b, "pipe", batch)
            turn = 0
            while not (seq.done and pipe.done):
                sides: list[_Drain] = [seq, pipe] if turn % 2 == 0 else [pipe, seq]
                for side in sides:
                    if not side.done:
                        side.run(20, pipelined=side is pipe)
                turn += 1
            print(
                f"  batch {batch:4d}: sequential {seq.rate:8,.0f} runs/s   pipelined "
                f"{pipe.rate:8,.0f} runs/s   ({pipe.rate / seq.rate:.2f}x)"
            )
    scratch.drop()


class _Drain:
    def __init__(self, conn: Conn, queue: str, batch: int, claim: str | None = None) -> None:
        self.conn = conn
        self.claim = claim if claim is not None else _sql.query("claim")
        self.worker_id = uuid.uuid4()
        self.params = {
            "queue": queue,
            "limit": batch,
            "worker_id": self.worker_id,
            "lease_seconds": 30.0,
            **FROM_FRONT,
        }
        self.pending: list[dict[str, Any]] = []
        self.done = False
        self.count = 0
        self.spent = 0.0

    @property
    def rate(self) -> float:
        return self.count / self.spent

    def run(self, cycles: int, *, pipelined: bool) -> None:
        t0 = time.perf_counter()
        claim, complete = self.claim, _sql.query("complete")
        wid = self.worker_id
        for _ in range(cycles):
            if not pipelined:
                with self.conn.cursor(row_factory=dict_row) as cur:
                    rows = cur.execute(claim, self.params).fetchall()
                if rows:
                    self.conn.execute(complete, _outcomes(rows, wid)).fetchall()
            else:
                with self.conn.pipeline(), self.conn.cursor(row_factory=dict_row) as cur:
                    done = self.conn.execute(complete, _outcomes(self.pending, wid))
                    cur.execute(claim, self.params)
                    done.fetchall()
                    rows = cur.fetchall()
                self.count += len(self.pending)
                self.pending = rows
            if not pipelined:
                self.count += len(rows)
            if not rows and not self.pending:
                self.done = True
                break
        self.spent += time.perf_counter() - t0


def backend_cpu(conn: Conn) -> float:
    """CPU seconds (user+sys) the server process of `conn` has used so far (/proc; the
    bench runs on the database host)."""
    pid = conn.info.backend_pid
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def server_cpu(scratch: Scratch, n: int = 30_000, batches: Sequence[int] = (10, 100, 500)) -> None:
    """Where the time of the worker's SQL goes: claim.sql + complete.sql in a loop on one
    connection (no task code), with the server process's CPU (from /proc) and this
    client's CPU per run. The server's share is a floor no worker change removes."""
    print(f"== server-cpu: drain {n:,} runs with claim.sql + complete.sql, per batch size")
    for batch in batches:
        scratch.fresh()
        with scratch.connect() as conn:
            bulk_load(conn, n)
            vacuum_analyze(conn)
            drain = _Drain(conn, "bench", batch)
            cpu0, client0 = backend_cpu(conn), time.process_time()
            while not drain.done:
                drain.run(50, pipelined=False)
            server = backend_cpu(conn) - cpu0
            client = time.process_time() - client0
        print(
            f"  batch {batch:4d}: {drain.rate:7,.0f} runs/s; server CPU {1e6 * server / n:5.0f}"
            f" us/run, client CPU {1e6 * client / n:5.0f} us/run, wall "
            f"{1e6 * drain.spent / n:5.0f} us/run"
        )
    scratch.drop()


def fillfactor(
    scratch: Scratch, n: int = 60_000, factors: Sequence[int] = (100, 50, 35), rounds: int = 4
) -> None:
    """pgqueue.runs at several fillfactors: claim.sql + complete.sql (batches of 100) on
    one connection, per run: the server process's CPU and the WAL records it wrote. A
    row updated where no room is left on its page moves to another page, and PostgreSQL
    writes an extra Heap/LOCK record for the old version before it lets go of that page;
    room left at insert lets both of a run's updates stay on its page."""
    print(f"== fillfactor: drain {n:,} runs per side, {rounds} rounds, interleaved")
    variants: dict[str, str | tuple[str, str]] = {
        f"fillfactor {f:3d}": f"ALTER TABLE pgqueue.runs SET (fillfactor = {int(f)})"
        for f in factors
    }
    _schema_variants(scratch, variants, n, rounds)


def index_cost(scratch: Scratch, n: int = 60_000, rounds: int = 4) -> None:
    """What the indexes a run enters after its enqueue cost per run: claim.sql +
    complete.sql as in `fillfactor`, with the schema as it is, without runs_finished_idx
    (entered at completion; pruning and "finished lately" read it), and without
    runs_lease_idx too (entered at the claim; the rescuer reads it). A measurement of the
    price of each, not a schema anyone should run."""
    print(f"== index-cost: drain {n:,} runs per side, {rounds} rounds, interleaved")
    variants: dict[str, str | tuple[str, str]] = {
        "as is": "SELECT 1",
        "no runs_finished_idx": "DROP INDEX pgqueue.runs_finished_idx",
        "no runs_finished_idx, runs_lease_idx": (
            "DROP INDEX pgqueue.runs_finished_idx; DROP INDEX pgqueue.runs_lease_idx"
        ),
    }
    _schema_variants(scratch, variants, n, rounds)


CLAIM_BY_TID = " WHERE r.ctid = ANY(ARRAY(SELECT ctid FROM picked))"


def claim_by_key() -> str:
    """claim.sql without the update by TID: the scans lock and return ids, and the update
    finds each run again through the primary key."""
    query = _sql.query("claim")
    assert CLAIM_BY_TID in query, "claim.sql no longer updates by TID"
    query = query.replace(CLAIM_BY_TID, " WHERE r.id = ANY(ARRAY(SELECT id FROM picked))")
    return query.replace("SELECT ctid FROM", "SELECT id FROM")


def claim_tid(scratch: Scratch, n: int = 60_000, rounds: int = 6) -> None:
    """claim.sql updates the versions its scans locked by TID; before, by primary key
    (claim_by_key): one descent of runs_pkey per run more. Server CPU per run as in
    `fillfactor`."""
    print(f"== claim-tid: drain {n:,} runs per side, {rounds} rounds, interleaved")
    variants: dict[str, str | tuple[str, str]] = {
        "update by TID (claim.sql)": "SELECT 1",
        "update by primary key": ("SELECT 1", claim_by_key()),
    }
    _schema_variants(scratch, variants, n, rounds)


def _schema_variants(
    scratch: Scratch, variants: dict[str, str | tuple[str, str]], n: int, rounds: int
) -> None:
    """Drain `n` bulk-loaded runs with claim.sql + complete.sql (batches of 100) on one
    connection after each variant's DDL (a variant may also be (DDL, its own claim
    query)), rounds interleaved: the server process's CPU and the WAL records
    (cluster-wide: run it on a quiet server) per run."""
    wal = "SELECT wal_records FROM pg_stat_wal"
    seen: dict[str, list[tuple[float, float]]] = {label: [] for label in variants}
    order = list(variants)
    for r in range(rounds):
        for label in order if r % 2 == 0 else order[::-1]:
            scratch.fresh()
            variant = variants[label]
            ddl, claim = variant if isinstance(variant, tuple) else (variant, None)
            with scratch.connect() as conn:
                # as on a worker's connection (Worker: plan_cache_mode)
                conn.execute("SET plan_cache_mode = force_generic_plan")
                conn.execute(ddl)  # type: ignore[call-overload]
                bulk_load(conn, n)
                vacuum_analyze(conn)
                drain = _Drain(conn, "bench", 100, claim)
                records0 = _one(conn, wal)
                cpu0 = backend_cpu(conn)
                while not drain.done:
                    drain.run(50, pipelined=False)
                cpu = backend_cpu(conn) - cpu0
                records = _one(conn, wal) - records0
            seen[label].append((1e6 * cpu / n, records / n))
            print(
                f"  round {r + 1} {label}: server CPU {1e6 * cpu / n:5.1f} us/run,"
                f" {records / n:4.2f} WAL records/run, {drain.rate:7,.0f} runs/s"
            )
    for label, got in seen.items():
        print(
            f"  {label}: median server CPU {statistics.median(c for c, _ in got):5.1f} us/run"
            f" ({' / '.join(f'{c:.1f}' for c, _ in got)}),"
            f" {statistics.median(w for _, w in got):4.2f} WAL records/run"
        )
    scratch.drop()


def _one(conn: Conn, query: str) -> float:
    row = conn.execute(query).fetchone()  # type: ignore[call-overload]
    assert row is not None
    return float(row[0])


def wal_records(scratch: Scratch, n: int = 50_000) -> None:
    """The WAL a drain writes, by record type (pg_waldump --stats=record), per run: one
    worker process (bench.apps' async no-op, concurrency 200) drains `n` bulk-loaded runs.
    Needs the server's pg_wal directory on this machine (PGQUEUE_BENCH_PGWAL, default the
    Debian PostgreSQL 15 layout) and pg_waldump on PATH or next to it. Other databases'
    writes during the drain land in the range too: run it on a quiet server."""
    pg_wal = os.environ.get("PGQUEUE_BENCH_PGWAL", "/var/lib/postgresql/15/main/pg_wal")
    waldump = "/usr/lib/postgresql/15/bin/pg_waldump"
    if not Path(waldump).exists():
        waldump = "pg_waldump"
    print(f"== wal-records: drain {n:,} runs, WAL records per run by type")
    dsn = scratch.fresh()
    with scratch.connect() as conn:
        bulk_load(conn, n, task="bench.anoop", queue=apps.ASYNC_QUEUE)
        vacuum_analyze(conn)
        start = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    cmd = worker_command(dsn, apps.ASYNC_QUEUE, 200, burst=True)
    subprocess.run(cmd, env=subprocess_env(), check=True)
    with scratch.connect() as conn:
        end = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert start is not None and end is not None
    out = subprocess.run(
        [waldump, "-p", pg_wal, "-s", start[0], "-e", end[0], "--stats=record"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 2 and "/" in parts[0] and parts[1].isdigit() and int(parts[1]) >= n // 100:
            print(f"  {parts[0]:24s} {int(parts[1]) / n:5.2f} per run")
        elif line.startswith("Total"):
            print(f"  {'all':24s} {int(parts[1]) / n:5.2f} per run")
    scratch.drop()


def pickup_split(scratch: Scratch, pings: int = 500) -> None:
    """Where an idle pickup's time goes, as bench.compare measures it (enqueue a ping,
    the task body reports over UDP): enqueue call start -> its transaction's start on the
    server (created_at), -> the claim's transaction start (started_at), -> the task body;
    one bench.compare pgqueue worker, a ping every 15 to 35 ms."""
    from bench import compare  # the peers' imports, only for this experiment

    print(f"== pickup-split: {pings} pings")
    lib = compare.PgqueueLib("pgqueue", scratch.server)
    lib.fresh()
    sent: dict[int, tuple[float, float]] = {}
    got = compare.Pings(lib)
    rng = random.Random(1)
    try:
        with lib.workers(1):
            time.sleep(4.0)  # start-up and LISTEN, as compare.pickup
            for i in range(pings + 10):
                t0 = time.time()
                lib.ping(i)
                sent[i] = (t0, time.time())
                got.collect(time.monotonic() + rng.uniform(0.015, 0.035))
            got.collect(time.monotonic() + 2.0)
        with psycopg.connect(lib.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT (args->>0)::int, extract(epoch FROM created_at)::float8,"
                " extract(epoch FROM started_at)::float8 FROM pgqueue.runs"
                " WHERE task = 'cmp.ping'"
            ).fetchall()
    finally:
        got.close()
        lib.close()
        lib.drop()
    parts: dict[str, list[float]] = {
        "call -> transaction start": [],
        "enqueue call": [],
        "transaction -> claim start": [],
        "claim start -> task body": [],
        "all": [],
    }
    for i, created, started in rows:
        body = got.got.get(("p", i))
        if i < 10 or body is None:
            continue
        call, returned = sent[i]
        parts["call -> transaction start"].append(1000 * (created - call))
        parts["enqueue call"].append(1000 * (returned - call))
        parts["transaction -> claim start"].append(1000 * (started - created))
        parts["claim start -> task body"].append(1000 * (body - started))
        parts["all"].append(1000 * (body - call))
    for name, values in parts.items():
        q = [percentile(values, p) for p in (50, 95, 99)]
        print(f"  {name:28s} p50 {q[0]:5.2f}  p95 {q[1]:5.2f}  p99 {q[2]:5.2f} ms")


# -- enqueue_many: 12 arrays + ON CONFLICT, or one JSON document --------------------------------

JSONB_ENQUEUE = """
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS i (
        task text, queue text, priority smallint, args jsonb, kwargs jsonb,
        max_attempts integer, timeout_seconds double precision, group_key text,
        run_at timestamptz, delay double precision, parent_id bigint)
),
inserted AS (
    INSERT INTO pgqueue.runs (task, queue, state, priority, args, kwargs, max_attempts,
                              timeout_seconds, group_key, run_at, parent_id)
    SELECT task, queue,
           CASE WHEN coalesce(run_at, now() + coalesce(delay, 0) * interval '1 second') > now()
                THEN 'scheduled' ELSE 'queued' END,
           priority, args, kwargs, max_attempts, timeout_seconds, coalesce(group_key, ''),
           coalesce(run_at, now() + coalesce(delay, 0) * interval '1 second'), parent_id
    FROM input
    RETURNING id, queue, state
)
SELECT id, (SELECT count(pg_notify('pgqueue_queued', q.queue))
              FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'queued') q)
FROM inserted
"""

ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def _jsonb_batch(task: tasks.Task[Any, Any], items: Sequence[tuple[Any, ...]]) -> str:
    """What a leaner enqueue_many could send: one JSON document of rows without
    idempotency keys (rows with keys keep the ON CONFLICT path). Arguments are still
    encoded per row so that the payload-size limit can be checked per run."""
    head = ENCODER.encode(
        {
            "task": task.name,
            "queue": task.queue,
            "priority": task.priority,
            "max_attempts": task.max_attempts,
        }
    )[:-1]
    parts = [f'{head},"args":{ENCODER.encode(list(item))},"kwargs":{{}}}}' for item in items]
    return "[" + ",".join(parts) + "]"


def enqueue_jsonb(scratch: Scratch, batches: int = 60, batch: int = 1000) -> None:
    """enqueue_many (current) against a prototype: one jsonb parameter, plain INSERT
    (no ON CONFLICT for rows without an idempotency key), a reused JSON encoder."""
    print(f"== enqueue-jsonb: {batches} x {batch:,} runs per side, interleaved")
    dsn = scratch.fresh()
    apps.app.configure(dsn=dsn)
    items = [(i,) for i in range(batch)]
    row_time = timeit.timeit(
        lambda: [apps.noop.make_row(it, {}, tasks.EnqueueOptions()) for it in items], number=5
    )
    doc_time = timeit.timeit(lambda: _jsonb_batch(apps.noop, items), number=5)
    print(
        f"  client only: Task.make_row x{batch}: {1e6 * row_time / 5 / batch:.1f} us/run;"
        f" prototype document: {1e6 * doc_time / 5 / batch:.1f} us/run"
    )
    spent = {"enqueue_many": 0.0, "prototype": 0.0}
    with scratch.connect() as conn:
        for _ in range(3):
            apps.noop.enqueue_many(items)
            conn.execute(JSONB_ENQUEUE, {"rows": _jsonb_batch(apps.noop, items)}).fetchall()
        for i in range(batches):
            order = ["enqueue_many", "prototype"] if i % 2 == 0 else ["prototype", "enqueue_many"]
            for side in order:
                t0 = time.perf_counter()
                if side == "enqueue_many":
                    apps.noop.enqueue_many(items)
                else:
                    doc = _jsonb_batch(apps.noop, items)
                    conn.execute(JSONB_ENQUEUE, {"rows": doc}).fetchall()
                spent[side] += time.perf_counter() - t0
        total = batches * batch
        a, b = total / spent["enqueue_many"], total / spent["prototype"]
        print(f"  enqueue_many {a:9,.0f} runs/s   prototype {b:9,.0f} runs/s   ({b / a:.2f}x)")
        for name, query, params in (
            ("enqueue.sql", _sql.query("enqueue"), None),
            ("prototype", JSONB_ENQUEUE, {"rows": _jsonb_batch(apps.noop, items)}),
        ):
            if params is None:
                rows = [apps.noop.make_row(it, {}, tasks.EnqueueOptions()) for it in items]
                params = _enqueue_params(rows)
            with conn.transaction(force_rollback=True):
                out = conn.execute("EXPLAIN (ANALYZE, TIMING OFF) " + query, params).fetchall()
            print(f"  server side, {name:12s}: {out[-1][0]}")
    apps.app.close()
    scratch.drop()


def _enqueue_params(rows: Sequence[tasks.RunRow]) -> dict[str, Any]:
    from dataclasses import fields

    params: dict[str, Any] = {f.name: [getattr(r, f.name) for r in rows] for f in fields(rows[0])}
    params["notify"] = True
    return params


ON_CONFLICT = "    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING\n"
FLOOR_INSERT = (
    "INSERT INTO pgqueue.runs (task, queue, args)"
    " SELECT 'bench.noop', 'bench', jsonb_build_array(g) FROM generate_series(1, 1000) g"
)


def enqueue_server(scratch: Scratch, rounds: int = 15, batch: int = 1000) -> None:
    """Server-side execution time of inserting 1,000 runs (EXPLAIN ANALYZE, TIMING OFF,
    rolled back, median of `rounds`, variants interleaved): enqueue.sql; enqueue.sql
    without its ON CONFLICT clause (what rows without an idempotency key need); the
    jsonb prototype; and a bare INSERT ... SELECT generate_series (the floor: heap,
    indexes, constraints)."""
    print(f"== enqueue-server: ms of server execution per {batch:,} rows, median of {rounds}")
    scratch.fresh()
    apps.app.configure(dsn=scratch.dsn)
    items = [(i,) for i in range(batch)]
    rows = [apps.noop.make_row(it, {}, tasks.EnqueueOptions()) for it in items]
    params = _enqueue_params(rows)
    query = _sql.query("enqueue")
    if ON_CONFLICT not in query:
        raise RuntimeError("enqueue.sql changed shape: update bench/experiments.py")
    variants: dict[str, tuple[str, dict[str, Any] | None]] = {
        "enqueue.sql": (query, params),
        "enqueue.sql without ON CONFLICT": (query.replace(ON_CONFLICT, ""), params),
        "jsonb prototype": (JSONB_ENQUEUE, {"rows": _jsonb_batch(apps.noop, items)}),
        "INSERT ... generate_series (floor)": (FLOOR_INSERT, None),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    with scratch.connect() as conn:
        for _ in range(rounds):
            for name, (text, args) in variants.items():
                with conn.transaction(force_rollback=True):
                    out = conn.execute("EXPLAIN (ANALYZE, TIMING OFF) " + text, args).fetchall()
                times[name].append(float(out[-1][0].split()[2]))
        indexes = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'pgqueue' AND tablename = 'runs'"
        ).fetchone()
    for name, values in times.items():
        print(f"  {name:36s} {statistics.median(values):6.2f} ms")
    print(f"  (pgqueue.runs has {indexes[0] if indexes else '?'} indexes)")
    apps.app.close()
    scratch.drop()


# -- bulk enqueue: what the group-claim index costs -------------------------------------------


def group_index(scratch: Scratch, rounds: int = 3, samples: int = 6, batch: int = 1000) -> None:
    """enqueue_many of `batch` runs as the schema has it vs without runs_group_claim_idx
    (which only limited queues read): jobs/s, median of `samples` x 10 batches per side and
    round, the sides alternating, each on a fresh scratch database."""
    print(f"== group-index: enqueue_many of {batch:,}, {rounds} rounds")
    items = [(i,) for i in range(batch)]
    sides = {
        "as migrated": [],
        "without runs_group_claim_idx": ["DROP INDEX pgqueue.runs_group_claim_idx"],
    }
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, setup in sides.items():
            scratch.fresh()
            with scratch.connect() as conn:
                for statement in setup:
                    conn.execute(statement)  # type: ignore[call-overload]
            apps.app.configure(dsn=scratch.dsn)
            for _ in range(3):
                apps.noop.enqueue_many(items)
            got = []
            for _ in range(samples):
                t0 = time.perf_counter()
                for _ in range(10):
                    apps.noop.enqueue_many(items)
                got.append(10 * batch / (time.perf_counter() - t0))
            apps.app.close()
            rates[name].append(statistics.median(got))
    for name, values in rates.items():
        print(
            f"  {name:30s} {statistics.median(values):9,.0f} jobs/s (rounds: "
            + ", ".join(f"{v:,.0f}" for v in values)
            + ")"
        )
    scratch.drop()


# -- bulk enqueue: the plain batch statement ---------------------------------------------------


def enqueue_plain(scratch: Scratch, rounds: int = 3, samples: int = 6, batch: int = 1000) -> None:
    """enqueue_runs_plain.sql vs enqueue_runs.sql for the same enqueue_many batch of
    `batch` runs ([args, kwargs] each): jobs/s of the statement and its commit on one
    connection, median of `samples` x 10 batches per side and round, sides alternating,
    each on a fresh scratch database."""
    print(f"== enqueue-plain: batches of {batch:,}, {rounds} rounds")
    apps.app.configure(dsn=scratch.dsn)
    run_batch = tasks.RunBatch.build(
        apps.noop, tasks.EnqueueOptions(), [(i,) for i in range(batch)]
    )
    assert run_batch.plain
    _, params = _statement(run_batch, keyed=False)
    params["notify"] = True
    rates: dict[str, list[float]] = {"enqueue_runs_plain.sql": [], "enqueue_runs.sql": []}
    for _ in range(rounds):
        for name in rates:
            query = _sql.query(name.removesuffix(".sql"))
            scratch.fresh()
            with scratch.connect() as conn:
                for _ in range(3):
                    conn.execute(query, params)
                got = []
                for _ in range(samples):
                    t0 = time.perf_counter()
                    for _ in range(10):
                        conn.execute(query, params)
                    got.append(10 * batch / (time.perf_counter() - t0))
            rates[name].append(statistics.median(got))
    for name, values in rates.items():
        print(
            f"  {name:24s} {statistics.median(values):9,.0f} jobs/s (rounds: "
            + ", ".join(f"{v:,.0f}" for v in values)
            + ")"
        )
    apps.app.close()
    scratch.drop()


# -- single enqueue: one pooled connection, or two taking turns ------------------------------


def pool_turns(scratch: Scratch, calls: int = 3000, rounds: int = 5) -> None:
    """A single-run enqueue (enqueue_run.sql, as Task.enqueue sends it) per pool request,
    back to back from one thread, through a psycopg_pool pool holding one connection and
    through one holding two. psycopg_pool hands its idle connections out in turn, so with
    two the calls alternate between two backends, as an App's pool did when its first
    request arrived before its first connection was open (it now opens with one ready).
    Rounds interleaved; wall and client CPU (user + sys) per call, medians."""
    from psycopg_pool import ConnectionPool

    print("== pool-turns (us per enqueue)")
    dsn = scratch.fresh()
    row = apps.noop.make_row((1,), {}, tasks.EnqueueOptions())
    query, params = _statement([row], keyed=False)
    params["notify"] = True
    pools = {
        n: ConnectionPool(dsn, min_size=n, max_size=n, kwargs={"autocommit": True}, open=False)
        for n in (1, 2)
    }
    for pool in pools.values():
        pool.open(wait=True)
    got: dict[int, list[tuple[float, float]]] = {n: [] for n in pools}
    try:
        for _ in range(rounds):
            for n, pool in pools.items():
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(calls):
                    with pool.connection() as conn:
                        conn.execute(query, params).fetchone()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                got[n].append((1e6 * wall / calls, 1e6 * cpu / calls))
    finally:
        for pool in pools.values():
            pool.close()
    for n, values in got.items():
        walls = [w for w, _ in values]
        print(
            f"  {n} connection(s): {statistics.median(walls):6.1f} us wall"
            f" ({1e6 / statistics.median(walls):,.0f} calls/s),"
            f" {statistics.median(c for _, c in values):6.1f} us client CPU"
            " (rounds: " + ", ".join(f"{w:.0f}" for w in walls) + ")"
        )
    scratch.drop()


# -- start-up --------------------------------------------------------------------------------


def startup(scratch: Scratch) -> None:
    """What a worker process pays before its first claim, and what `import pgqueue` costs
    any producer."""
    print("== startup")
    dsn = scratch.fresh()
    env = subprocess_env()
    for code in (
        "import pgqueue",
        "import alembic.command, alembic.config, alembic.script",
        "import psycopg, psycopg_pool",
        "pass",
    ):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True)
            times.append(time.perf_counter() - t0)
        print(f"  python -c '{code}': {1000 * statistics.median(times):.0f} ms (median of 3)")
    times, cpus = [], []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(worker_command(dsn, "bench", 10, burst=True), env=env, cwd=ROOT, check=True)
        times.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    print(
        f"  worker --burst on an empty queue, spawn to exit: {1000 * statistics.median(times):.0f}"
        f" ms wall, {1000 * statistics.median(cpus):.0f} ms CPU (median of 3)"
    )
    scratch.drop()


# -- per-run Python costs in the worker ------------------------------------------------------


def python_costs() -> None:
    """Per-run CPU of the pieces the worker runs for every claimed run (microbenchmarks,
    no database)."""
    print("== python-costs (us per call, best of 5)")
    row = Claimed(1, "bench.noop", "bench", [1], {}, 1, 3, None, "", 0, "", None, 0.0, False)
    task = apps.noop

    async def make_tasks(k: int) -> None:
        async def nothing() -> None:
            return None

        await asyncio.gather(*(asyncio.create_task(nothing()) for _ in range(k)))

    cases: list[tuple[str, Callable[[], Any]]] = [
        ("threading.Event()", threading.Event),
        ("app.make_context(row)", lambda: apps.app.make_context(row)),
        ("Task.validate([1], {}) (Signature.bind)", lambda: task.validate([1], {})),
        ("json.loads('[1]') (psycopg jsonb -> args)", lambda: json.loads("[1]")),
        ("uuid.uuid4()", uuid.uuid4),
    ]
    for label, fn in cases:
        best = min(timeit.repeat(fn, number=20_000, repeat=5)) / 20_000
        print(f"  {label:45s} {1e6 * best:7.2f}")
    best = min(timeit.repeat(lambda: asyncio.run(make_tasks(1000)), number=1, repeat=5)) / 1000
    print(f"  {'asyncio.create_task + run (per task)':45s} {1e6 * best:7.2f}")


# -- completion: by primary key, or hashing every running run ---------------------------------

COMPLETE_BY_KEY = "       AND r.id = ANY(ARRAY(SELECT id FROM outcome))\n"
COMPLETE_STATE = "       AND r.state = 'running'\n"


def completion_running(
    scratch: Scratch, others: Sequence[int] = (0, 3000), cycles: int = 150, rounds: int = 5
) -> None:
    """complete.sql (finds its runs by primary key) vs its earlier shape (`state =
    'running'` instead of the primary key test, which lets the plan hash every running run
    from runs_lease_idx): server CPU per run of claim + complete cycles of 50 runs on one
    connection with generic plans, while `others` runs of another worker are running.
    The outcomes take complete.sql's document path, the one the test is in (successes
    without a result: plain successes take the `succeeded` part, by id)."""
    current = _sql.query("complete")
    if COMPLETE_BY_KEY not in current:
        raise RuntimeError("complete.sql changed shape: update bench/experiments.py")
    sides = {
        "complete.sql": current,
        "state = 'running'": current.replace(COMPLETE_BY_KEY, COMPLETE_STATE),
    }
    print(f"== completion-running: claim + complete of 50, {cycles} cycles x {rounds} rounds")
    for other in others:
        scratch.fresh()
        with scratch.connect() as conn:
            bulk_load(conn, other + 2 * rounds * cycles * 50 + 1000)
            vacuum_analyze(conn)
            conn.execute("SET plan_cache_mode = force_generic_plan")
            worker_id = uuid.uuid4()
            params = {"queue": "bench", "limit": 50, "worker_id": worker_id, "lease_seconds": 30}
            params |= FROM_FRONT
            if other:
                busy = params | {"limit": other, "worker_id": uuid.uuid4(), "lease_seconds": 3600}
                conn.execute(_sql.query("claim"), busy)
            spent: dict[str, list[float]] = {name: [] for name in sides}
            for _ in range(rounds):
                for name, query in sides.items():
                    cpu0, n = backend_cpu(conn), 0
                    for _ in range(cycles):
                        rows = conn.execute(_sql.query("claim"), params, prepare=True).fetchall()
                        outcomes = [Outcome(r[0], r[8], "succeeded") for r in rows]
                        sent = complete_params(outcomes, worker_id)
                        assert sent["succeeded"] == "{}", "outcomes took the hot path"
                        conn.execute(query, sent, prepare=True)
                        n += len(rows)
                    spent[name].append(1e6 * (backend_cpu(conn) - cpu0) / n)
        for name, values in spent.items():
            print(
                f"  {other:5,} others running, {name:18s}: server CPU "
                f"{statistics.median(values):5.1f} us/run (rounds: "
                + ", ".join(f"{v:.1f}" for v in values)
                + ")"
            )
    scratch.drop()


def claim_and_complete(
    conn: Conn, claim: str, params: dict[str, Any], wid: uuid.UUID, marks: ClaimMarks | None
) -> int:
    """One claim (from the worker's marks when given, else as `params` say) and the
    completion of every run it took; the number of runs."""
    start = marks.start("bench") if marks is not None else {}
    with conn.cursor(row_factory=claimed_row) as cur:
        rows = cur.execute(claim, params | start, prepare=True).fetchall()
    if marks is not None:
        marks.landed("bench", rows)
    conn.execute(_sql.query("complete"), _outcomes([r._asdict() for r in rows], wid), prepare=True)
    return len(rows)


def walk_segments(
    conn: Conn, n: int, segment: int, claim_once: Callable[[], int], index: str
) -> None:
    """Drain `n` runs with `claim_once` (one claim + its completion; returns the runs it
    took) in segments of `segment`, then VACUUM and drain one more; print per segment the
    backend's CPU per run and the pages of `index` read per claim."""

    def blocks() -> int:
        # A backend reports its statistics at most once a second unless told to: without
        # this, a segment's pages land partly in the next one's figure.
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(
            "SELECT idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes"
            " WHERE indexrelname = %s",
            (index,),
        ).fetchone()
        assert row is not None
        return int(row[0])

    claimed = 0
    for k in range(n // segment + 1):
        if k == n // segment:
            conn.execute("VACUUM pgqueue.runs")
        cpu0, blocks0, done, claims = backend_cpu(conn), blocks(), 0, 0
        while done < segment:
            done, claims = done + claim_once(), claims + 1
        cpu = 1e6 * (backend_cpu(conn) - cpu0) / done
        pages = (blocks() - blocks0) / claims
        label = "after VACUUM" if k == n // segment else f"{claimed:,} claimed before"
        print(
            f"  {label:>24s}: server CPU {cpu:5.1f} us/run,"
            f" {index} pages read per claim {pages:6.1f}",
            flush=True,
        )
        claimed += done


def claim_walk(scratch: Scratch, n: int = 200_000, segment: int = 20_000) -> None:
    """What claimed runs cost later claims until VACUUM. A claim from the front of its
    queue reads runs_claim_idx through the entries of every run claimed since the last
    vacuum (marked dead and skipped, but their pages are read). Drains `n` runs with
    claim.sql + complete.sql (batches of 50, one connection, generic plans) without
    vacuum, and prints per segment the server CPU per run and the claim index's pages
    read per claim; then VACUUMs and drains one more segment. Two sides, each on a fresh
    database: every claim from the front, and claims that start after the last one
    (semaphores.ClaimMarks, as the worker does: from the front every 0.1 s)."""
    print(f"== claim-walk: {n:,} runs in segments of {segment:,}, no vacuum, then VACUUM")
    for side in ("from the front", "after the mark"):
        print(f"  -- {side}")
        scratch.fresh()
        with scratch.connect() as conn:
            bulk_load(conn, n + segment)
            vacuum_analyze(conn)
            conn.execute("SET plan_cache_mode = force_generic_plan")
            wid = uuid.uuid4()
            params = {"queue": "bench", "limit": 50, "worker_id": wid, "lease_seconds": 300}
            marks = None if side == "from the front" else ClaimMarks(every=FRONT_EVERY)
            if marks is None:
                params |= FROM_FRONT
            once = functools.partial(
                claim_and_complete, conn, _sql.query("claim"), params, wid, marks
            )
            walk_segments(conn, n, segment, once, "runs_claim_idx")
    scratch.drop()


def drain_monitor(scratch: Scratch, jobs: int = 60_000, seconds: float = 3.0) -> None:
    """What watching a drain costs the server: bench.compare's drains polled an exact count
    of the unfinished jobs (every 50 ms; bench.cpu every 20 ms) and now poll cheap index
    probes (every 10 ms: compare.watch_drain). Per library (pgqueue and pgqueuer, bench
    extra), `jobs` bulk-enqueued jobs and no worker: each way of polling for `seconds`, and
    the CPU of the polling backend per poll and in cores. Parallel workers that a count
    starts are not counted (they exit with the query), so the counts' figures are a floor."""
    from bench import compare

    print(f"== drain-monitor: {jobs:,} queued jobs, {seconds:.0f} s per way of polling")
    for name in ("pgqueue", "pgqueuer"):
        lib = compare.CLASSES[name](name, scratch.server)
        lib.fresh()
        try:
            lib.bulk(jobs // 1000 - 2, 1000)
            with psycopg.connect(lib.dsn, autocommit=True) as conn:
                lib.vacuum(conn)
                ways = (
                    ("count, every 20 ms (bench.cpu before)", lib.unfinished_sql(), 0.02),
                    ("count, every 50 ms (bench.compare before)", lib.unfinished_sql(), 0.05),
                    ("probes, every 10 ms (now)", lib.pending_sql(), compare.POLL),
                )
                for label, query, every in ways:
                    cpu0, t0, polls = backend_cpu(conn), time.monotonic(), 0
                    while time.monotonic() - t0 < seconds:
                        conn.execute(query).fetchone()  # type: ignore[call-overload]
                        polls += 1
                        time.sleep(every)
                    cpu = backend_cpu(conn) - cpu0
                    print(
                        f"  {name:>8s}, {label:<42s}: {1000 * cpu / polls:5.2f} ms per poll,"
                        f" {cpu / (time.monotonic() - t0):.2f} cores",
                        flush=True,
                    )
        finally:
            lib.close()
            lib.drop()


def limited_walk(scratch: Scratch, n: int = 100_000, segment: int = 20_000) -> None:
    """claim-walk for a queue with limits (claim_limited, which reads runs_group_claim_idx):
    `n` runs drained with claim_limited + complete.sql (batches of 50, one connection, no
    vacuum), then VACUUM and one more segment; per segment the server CPU per run and the
    group index's pages read per claim. Two queues: a queue limit only (every run in group
    ''), and 100 groups with a group limit that is never reached."""
    print(f"== limited-walk: {n:,} runs in segments of {segment:,}, no vacuum, then VACUUM")
    for groups in (0, 100):
        label = "queue limit, one group" if not groups else f"{groups} groups, group limit"
        print(f"  -- {label}")
        scratch.fresh()
        with scratch.connect() as conn:
            bulk_load(conn, n + segment)
            if groups:
                conn.execute("UPDATE pgqueue.runs SET group_key = 'g' || (id %% %s)", (groups,))
            conn.execute(
                "INSERT INTO pgqueue.queues (name, concurrency, group_concurrency)"
                " VALUES ('bench', 1000000, %s)",
                (1000000 if groups else None,),
            )
            vacuum_analyze(conn)
            wid = uuid.uuid4()
            params = {
                "queue": "bench",
                "limit": 50,
                "worker_id": wid,
                "lease_seconds": 300,
                "finishing": [],
            }
            claim = _sql.query("claim_limited")
            once = functools.partial(claim_and_complete, conn, claim, params, wid, None)
            walk_segments(conn, n, segment, once, "runs_group_claim_idx")
    scratch.drop()


EXPERIMENTS: dict[str, Callable[[Scratch], None]] = {
    "claim-any": claim_any,
    "claim-commit": claim_commit,
    "drain-pipeline": drain_pipeline,
    "server-cpu": server_cpu,
    "fillfactor": fillfactor,
    "index-cost": index_cost,
    "claim-tid": claim_tid,
    "wal-records": wal_records,
    "pickup-split": pickup_split,
    "completion-running": completion_running,
    "claim-walk": claim_walk,
    "drain-monitor": drain_monitor,
    "limited-walk": limited_walk,
    "enqueue-jsonb": enqueue_jsonb,
    "enqueue-server": enqueue_server,
    "group-index": group_index,
    "enqueue-plain": enqueue_plain,
    "pool-turns": pool_turns,
    "startup": startup,
    "python-costs": lambda _scratch: python_costs(),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.experiments", description=__doc__)
    p.add_argument("experiments", nargs="+", choices=("all", *EXPERIMENTS))
    p.add_argument("--server", default=DEFAULT_SERVER)
    p.add_argument("--db", default="pgqueue_bench_exp")
    args = p.parse_args(argv)
    names = list(EXPERIMENTS) if "all" in args.experiments else args.experiments
    scratch = Scratch(args.server, args.db)
    try:
        for name in names:
            EXPERIMENTS[name](scratch)
    finally:
        scratch.drop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
