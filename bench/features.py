"""Benchmarks of concurrency limits (semaphores) and durable workflows.

    python -m bench.features --repeat 3
    python -m bench.features semaphores --runs 20000 --concurrency 50 --procs 1,2
    python -m bench.features workflows --wf-runs 3000 --wf-concurrency 10,50
    python -m bench.features claim-groups --group-counts 1,10,100,1000,10000

semaphores: worker processes (`python -m pgqueue worker --app bench.feature_apps:app`,
not --burst, stopped once all runs succeeded) drain n queued async no-op runs of (a) a
queue without limits, (b) a queue with concurrency 50, (b2) one with concurrency 1000 (never
reached), (c) a queue with group_concurrency 1 whose runs are spread evenly over 1,000
groups. Throughput = n / (max(finished_at) - min(started_at)) on the
database clock. Ratio (b)/(a) and (c)/(a) per repeat, same process count. Also: the SQL
alone (claim + complete on one connection, batch = --concurrency) per queue, and EXPLAIN
ANALYZE of claim_limited (bench/out/explain_features_*.txt).

workflows: one worker process drains n queued runs of a plain sync no-op task, then of a
workflow of four no-op `ctx.step` calls. Cost per step = (1/wf_rate - 1/task_rate) / 4.
Transactions per run = delta of xact_commit + xact_rollback of the scratch database in
pg_stat_database over the drain (the App's pool is autocommit: one statement, one
transaction, one round trip; pg_stat_statements is not preloaded on this server).

Every configuration gets a freshly created and migrated scratch database.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shlex
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from bench import feature_apps as fa
from bench import run
from bench.cases import Context, _outcomes, explain_prepared
from bench.common import (
    DEFAULT_SERVER,
    ROOT,
    Conn,
    Figure,
    Scratch,
    busy_since,
    cpu_mark,
    fmt,
    subprocess_env,
    vacuum_analyze,
    worker_command,
    write_report,
)
from pgqueue.db import sql as _sql
from pgqueue.worker.registration import configure_params
from pgqueue.worker.semaphores import ClaimMarks

APP = "bench.feature_apps:app"
RATIO_TARGET = 0.70  # (b) and (c) within 30% of (a)
EXTRA_ROUND_TRIPS_TARGET = 1.0  # a step costs at most one extra round trip


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


# -- loading and draining --------------------------------------------------------------------


def load(conn: Conn, n: int, *, task: str, queue: str, groups: int = 0) -> None:
    """n queued runs; with `groups`, run g goes to group 'g' || (g % groups) (evenly)."""
    group = (
        sql.SQL("'g' || lpad((g % {})::text, 4, '0')").format(sql.Literal(groups))
        if groups
        else sql.SQL("''")
    )
    conn.execute(
        sql.SQL(
            "INSERT INTO pgqueue.runs (task, queue, state, args, kwargs, group_key, limited)"
            " SELECT {task}, {queue}, 'queued', jsonb_build_array(g), '{{}}'::jsonb, {group},"
            # flagged as an enqueue would (a queue configured later re-flags by trigger)
            "   EXISTS (SELECT 1 FROM pgqueue.queues q WHERE q.name = {queue}"
            "           AND ({limits}))"
            " FROM generate_series(1, {n}) AS g"
        ).format(
            task=sql.Literal(task),
            queue=sql.Literal(queue),
            group=group,
            n=sql.Literal(n),
            limits=sql.SQL(_sql.part("queue_flags_runs")),
        )
    )
    vacuum_analyze(conn)


def configure(conn: Conn, queue: str) -> None:
    """Write the queue's limits as the worker would at start (for the SQL-only loops)."""
    cfg = fa.app.queues.get(queue)
    if cfg is not None:
        conn.execute(_sql.query("configure_queue"), configure_params(cfg))


def xacts(server: str, dbname: str) -> int:
    """Committed + rolled back transactions of `dbname` so far (pg_stat_database)."""
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            (dbname,),
        ).fetchone()
    return int(row[0]) if row else 0


def drain(
    scratch: Scratch, queue: str, n: int, concurrency: int, procs: int, *, cap: float = 90.0
) -> dict[str, float]:
    """`procs` workers of `concurrency` (not --burst: see below) drain `queue`, watched
    from here until all n runs succeeded or `cap` seconds passed; then SIGTERM. Returns the
    rate over the runs that succeeded, and details.

    Not --burst: a burst worker on a limited queue exits early (claim_limited still counts
    the runs whose outcome the completer has not written yet, the claim yields nothing and
    the worker, holding nothing, concludes the queue is empty)."""
    cmd = worker_command(scratch.dsn, queue, concurrency, burst=False)
    cmd[cmd.index("--app") + 1] = APP
    x0 = xacts(scratch.server, scratch.name)
    t0 = time.perf_counter()
    workers = [subprocess.Popen(cmd, cwd=ROOT, env=subprocess_env()) for _ in range(procs)]
    done = 0
    try:
        with scratch.connect() as conn:
            while time.perf_counter() - t0 < cap:
                row = conn.execute(
                    "SELECT count(*) FROM pgqueue.runs WHERE queue = %s AND state = 'succeeded'",
                    (queue,),
                ).fetchone()
                done = int(row[0]) if row else 0
                if done >= n or any(w.poll() is not None for w in workers):
                    break
                time.sleep(0.05)
    finally:
        wall = time.perf_counter() - t0
        for w in workers:
            if w.poll() is None:
                w.terminate()
        codes = [w.wait(30) for w in workers]
    if any(codes):
        raise RuntimeError(f"worker exit codes {codes}")
    time.sleep(0.5)  # exited backends flush their statistics
    x1 = xacts(scratch.server, scratch.name)
    with scratch.connect() as conn:
        row = conn.execute(
            "SELECT count(*),"
            " extract(epoch FROM max(finished_at) - min(started_at)),"
            " count(DISTINCT started_at),"
            " (SELECT count(*) FROM pgqueue.steps)"
            " FROM pgqueue.runs WHERE queue = %s AND state = 'succeeded'",
            (queue,),
        ).fetchone()
    assert row is not None
    ok, span, claims, steps = int(row[0]), float(row[1] or 0.0), int(row[2]), int(row[3])
    if ok == 0:
        raise RuntimeError(f"{queue}: nothing succeeded within {cap:.0f}s")
    return {
        "rate": ok / span if span else float("nan"),
        "done": ok,
        "complete": float(ok == n),
        "span": span,
        "wall": wall,
        "runs_per_claim": ok / claims,
        "xacts_per_run": (x1 - x0) / ok,
        "steps": steps,
    }


def drain_sql(conn: Conn, queue: str, limit: int, limited: bool, query: str = "") -> float:
    """Claim (claim.sql, or claim_limited.sql, or `query`) and complete
    every queued run of `queue` on one connection, running nothing. Returns runs/s."""
    worker_id = uuid.uuid4()
    params = {
        "queue": queue,
        "limit": limit,
        "worker_id": worker_id,
        "lease_seconds": 30.0,
        "finishing": [],
        **ClaimMarks().start(""),  # from the front
    }
    claim_q = _sql.query(query or ("claim_limited" if limited else "claim"))
    done = 0
    t0 = time.perf_counter()
    while True:
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(claim_q, params).fetchall()
        if not rows:
            break
        done += len(rows)
        conn.execute(_sql.query("complete"), _outcomes(rows, worker_id)).fetchall()
    return done / (time.perf_counter() - t0)


def explain_limited(conn: Conn, queue: str, limit: int) -> str:
    """EXPLAIN ANALYZE of claim_limited, in a rolled-back transaction:
    cold (nothing running) and steady (right after a claim of `limit` runs), custom and
    generic plans."""
    params = {
        "queue": queue,
        "limit": limit,
        "worker_id": uuid.uuid4(),
        "lease_seconds": 30.0,
        "finishing": [],
    }
    out = []
    for state in ("cold", "steady"):
        for mode in ("force_custom_plan", "force_generic_plan"):
            with conn.transaction(force_rollback=True):
                if state == "steady":
                    conn.execute(_sql.query("claim_limited"), params).fetchall()
                text = explain_prepared(conn, _sql.query("claim_limited"), params, mode)
                running = limit if state == "steady" else 0
                out.append(f"== {queue}, {state} ({running} running): claim_limited.sql {text}")
    return "\n\n".join(out)


# -- the benchmarks ------------------------------------------------------------------------

CONFIGS = {
    "a": (fa.FREE_QUEUE, 0, "(a) no limits"),
    "b": (fa.LIMITED_QUEUE, 0, f"(b) queue concurrency {fa.QUEUE_LIMIT}"),
    "b2": (fa.HIGH_LIMIT_QUEUE, 0, f"(b2) queue concurrency {fa.HIGH_LIMIT} (not binding)"),
    "c": (fa.GROUPS_QUEUE, 1000, f"(c) 1,000 groups, group_concurrency {fa.GROUP_LIMIT}"),
}


def semaphores(
    ctx: Context, *, n: int, concurrency: int, procs: Sequence[int], groups: int, cap: float
) -> list[Figure]:
    configs = {k: (q, groups if g else 0, label) for k, (q, g, label) in CONFIGS.items()}
    abs_figs: dict[tuple[str, int], Figure] = {}
    ratio_figs: dict[tuple[str, int], Figure] = {}
    claims: dict[tuple[str, int], list[float]] = {}
    for p in procs:
        for k, (_, _, label) in configs.items():
            name = f"{n:,} async no-op, {p} x c={concurrency}, {label}"
            abs_figs[k, p] = Figure(name, "runs/s", command=ctx.command)
            claims[k, p] = []
            if k != "a":
                ratio_figs[k, p] = Figure(
                    f"ratio {label} / (a), {p} x c={concurrency}",
                    "x (a)",
                    target=RATIO_TARGET,
                    command=ctx.command,
                )
    sql_figs = {
        k: Figure(f"  SQL only, batch {concurrency}, {label}", "runs/s", command=ctx.command)
        for k, (_, _, label) in configs.items()
    }
    incomplete: dict[str, list[float]] = {}
    for r in range(ctx.repeat):
        order = [(k, p) for p in procs for k in configs]
        random.Random(r).shuffle(order)
        for k, p in order:
            queue, g, label = configs[k]
            ctx.scratch.fresh()
            with ctx.scratch.connect() as conn:
                # limits first, as in a deployment: the backlog is enqueued flagged
                # (loaded first, the workers' start would re-flag all of it)
                configure(conn, queue)
                load(conn, n, task=fa.anoop.name, queue=queue, groups=g)
            res = drain(ctx.scratch, queue, n, concurrency, p, cap=cap)
            short = "" if res["complete"] else f"; ONLY {res['done']:.0f} of {n} done in the cap"
            incomplete.setdefault(f"{k}-{p}", []).append(res["done"])
            abs_figs[k, p].samples.append(res["rate"])
            claims[k, p].append(res["runs_per_claim"])
            ctx.log(
                f"  {label}, {p} x c={concurrency}, repeat {r + 1}: {fmt(res['rate'])} runs/s"
                f" (span {res['span']:.2f}s, wall {res['wall']:.2f}s, "
                f"{res['runs_per_claim']:.1f} runs/claim, {res['xacts_per_run']:.2f} xacts/run"
                f"{short})"
            )
        for p in procs:
            base = abs_figs["a", p].samples[-1]
            for k in ("b", "b2", "c"):
                ratio_figs[k, p].samples.append(abs_figs[k, p].samples[-1] / base)
        # the SQL alone, one connection, same batch size as the worker's slots
        for k in random.Random(100 + r).sample(list(configs), len(configs)):
            queue, g, label = configs[k]
            ctx.scratch.fresh()
            with ctx.scratch.connect() as conn:
                configure(conn, queue)
                load(conn, n, task=fa.anoop.name, queue=queue, groups=g)
                if r == 0 and k != "a":
                    ctx.details[f"explain_features_{k}"] = explain_limited(conn, queue, concurrency)
                rate = drain_sql(conn, queue, concurrency, limited=k != "a")
            sql_figs[k].samples.append(rate)
            ctx.log(f"  SQL only {label}, repeat {r + 1}: {fmt(rate)} runs/s")
    for key, fig in abs_figs.items():
        fig.note = f"runs per claim, median {statistics.median(claims[key]):.1f}"
    ctx.details["runs_per_claim"] = {f"{k}-{p}": v for (k, p), v in claims.items()}
    ctx.details["runs_done"] = incomplete
    return [*abs_figs.values(), *ratio_figs.values(), *sql_figs.values()]


def workflows(ctx: Context, *, n: int, concurrencies: Sequence[int]) -> list[Figure]:
    kinds = {
        "task": (fa.noop.name, fa.TASK_QUEUE, "plain sync no-op task"),
        "wf": (fa.wf4.name, fa.WORKFLOW_QUEUE, f"{fa.STEPS}-step no-op workflow"),
    }
    figs: dict[tuple[str, int], Figure] = {}
    xfigs: dict[tuple[str, int], Figure] = {}
    step_ms: dict[int, Figure] = {}
    step_rt: dict[int, Figure] = {}
    for c in concurrencies:
        for k, (_, _, label) in kinds.items():
            figs[k, c] = Figure(f"{n:,} x {label}, 1 x c={c}", "runs/s", command=ctx.command)
            xfigs[k, c] = Figure(
                f"  transactions per run, {label}, c={c}", "xacts/run", command=ctx.command
            )
        step_ms[c] = Figure(
            f"cost per step vs plain task, c={c}",
            "ms/step",
            baseline="(1/wf - 1/task) / 4",
            command=ctx.command,
        )
        step_rt[c] = Figure(
            f"extra round trips per step, c={c}",
            "xacts/step",
            target=EXTRA_ROUND_TRIPS_TARGET,
            higher_is_better=False,
            baseline="(wf - task xacts/run) / 4",
            command=ctx.command,
        )
    per_claim: dict[tuple[str, int], list[float]] = {}
    for r in range(ctx.repeat):
        order = [(k, c) for c in concurrencies for k in kinds]
        random.Random(r).shuffle(order)
        res: dict[tuple[str, int], dict[str, float]] = {}
        for k, c in order:
            task, queue, label = kinds[k]
            ctx.scratch.fresh()
            with ctx.scratch.connect() as conn:
                load(conn, n, task=task, queue=queue)
            res[k, c] = got = drain(ctx.scratch, queue, n, c, 1)
            if k == "wf" and got["steps"] != fa.STEPS * n:
                raise RuntimeError(f"{got['steps']} steps stored, expected {fa.STEPS * n}")
            figs[k, c].samples.append(got["rate"])
            xfigs[k, c].samples.append(got["xacts_per_run"])
            per_claim.setdefault((k, c), []).append(got["runs_per_claim"])
            ctx.log(
                f"  {label}, c={c}, repeat {r + 1}: {fmt(got['rate'])} runs/s"
                f" (span {got['span']:.2f}s, {got['runs_per_claim']:.1f} runs/claim,"
                f" {got['xacts_per_run']:.2f} xacts/run, {got['steps']} steps)"
            )
        for c in concurrencies:
            wf, task = res["wf", c], res["task", c]
            step_ms[c].samples.append(1000 * (1 / wf["rate"] - 1 / task["rate"]) / fa.STEPS)
            step_rt[c].samples.append((wf["xacts_per_run"] - task["xacts_per_run"]) / fa.STEPS)
            figs["wf", c].ratios.append(wf["rate"] / task["rate"])
    for key, fig in figs.items():
        fig.note = f"runs per claim, median {statistics.median(per_claim[key]):.1f}"
    for c in concurrencies:
        figs["wf", c].baseline = "plain sync no-op task, same c"
    out: list[Figure] = []
    for c in concurrencies:
        out += [figs["task", c], figs["wf", c], step_ms[c], step_rt[c]]
        out += [xfigs["task", c], xfigs["wf", c]]
    return out


def claim_groups(
    ctx: Context, *, n: int, limit: int, groups: Sequence[int], tries: int = 5
) -> list[Figure]:
    """Server execution time of one claim_limited of `limit` runs (EXPLAIN
    ANALYZE, TIMING OFF, generic plan, rolled back; median of `tries`) with n queued runs
    spread over each number of groups, group_concurrency 1: how a claim's cost grows with
    the number of groups holding queued runs."""
    figs = {
        g: Figure(
            f"claim_limited x{limit}, {n:,} queued in {g:,} groups", "ms", command=ctx.command
        )
        for g in groups
    }
    params = {"queue": fa.GROUPS_QUEUE, "limit": limit, "lease_seconds": 30.0, "finishing": []}
    for _ in range(ctx.repeat):
        for g in random.sample(list(groups), len(groups)):
            ctx.scratch.fresh()
            with ctx.scratch.connect() as conn:
                configure(conn, fa.GROUPS_QUEUE)
                load(conn, n, task=fa.anoop.name, queue=fa.GROUPS_QUEUE, groups=g)
                times = []
                for _ in range(tries):
                    with conn.transaction(force_rollback=True):
                        text = explain_prepared(
                            conn,
                            _sql.query("claim_limited"),
                            {**params, "worker_id": uuid.uuid4()},
                            "force_generic_plan",
                        )
                    times.append(float(text.rsplit("Execution Time:", 1)[1].split()[0]))
            figs[g].samples.append(statistics.median(times))
            ctx.log(f"  claim_limited, {g} groups: {figs[g].samples[-1]:.2f} ms")
    return list(figs.values())


# -- entry point -----------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.features",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "benchmarks",
        nargs="*",
        metavar="NAME",
        help="semaphores, workflows (default: both), claim-groups",
    )
    p.add_argument(
        "--group-counts",
        type=_ints,
        default=[1, 10, 100, 1000, 10000],
        help="claim-groups: numbers of groups",
    )
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--server", default=DEFAULT_SERVER)
    p.add_argument("--db", default="pgqueue_bench_features", help="scratch database (dropped!)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    p.add_argument(
        "--snapshot",
        action="store_true",
        help="freeze the core (pgqueue/, sql/, migrations/) into a temp dir first and run"
        " everything, worker subprocesses included, against that copy (as bench.run does)",
    )
    p.add_argument("--runs", type=int, default=20_000, help="semaphores: runs drained")
    p.add_argument("--concurrency", type=int, default=50, help="semaphores: worker slots")
    p.add_argument("--procs", type=_ints, default=[1, 2], help="semaphores: worker processes")
    p.add_argument("--groups", type=int, default=1000, help="semaphores (c): groups")
    p.add_argument("--cap", type=float, default=30.0, help="semaphores: seconds per drain, max")
    p.add_argument("--wf-runs", type=int, default=3_000, help="workflows: runs drained")
    p.add_argument("--wf-concurrency", type=_ints, default=[10, 50], help="workflows: slots")
    args = p.parse_args(argv)
    if not args.benchmarks:
        args.benchmarks = ["semaphores", "workflows"]
    unknown = set(args.benchmarks) - {"semaphores", "workflows", "claim-groups"}
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.snapshot and not os.environ.get(run.SNAPSHOT_ENV):
        return run.run_in_snapshot(args, argv, module="bench.features")
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    command = os.environ.get(run.COMMAND_ENV) or "python -m bench.features " + shlex.join(argv)
    scratch = Scratch(args.server, args.db)
    ctx = Context(scratch, args.repeat, command, log=lambda s: print(s, flush=True))
    facts = run.machine(args.server)
    print(
        f"machine: nproc={facts['nproc']} ({facts['cpu']}), {facts['postgres'].split(',')[0]},"
        f" Python {facts['python']}, psycopg {facts['psycopg']}, pgqueue {facts['pgqueue']}"
        f" @ {facts['git']}; load {facts['loadavg']}",
        flush=True,
    )
    figures: list[Figure] = []
    started = time.time()
    try:
        for name in args.benchmarks:
            load_avg = ", ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"== {name} (repeat {args.repeat}; load average {load_avg})", flush=True)
            mark, t0 = cpu_mark(), time.time()
            if name == "semaphores":
                figures += semaphores(
                    ctx,
                    n=args.runs,
                    concurrency=args.concurrency,
                    procs=args.procs,
                    groups=args.groups,
                    cap=args.cap,
                )
            elif name == "claim-groups":
                figures += claim_groups(
                    ctx, n=args.runs, limit=args.concurrency, groups=args.group_counts
                )
            else:
                figures += workflows(ctx, n=args.wf_runs, concurrencies=args.wf_concurrency)
            busy = busy_since(mark)
            ctx.details.setdefault("machine_busy", {})[name] = {
                "seconds": round(time.time() - t0, 1),
                "load_before": load_avg,
                "cpu_busy": round(busy, 3),
            }
            print(f"   {name}: {time.time() - t0:.0f}s, all CPUs {100 * busy:.0f}% busy")
    finally:
        scratch.drop()
    write_report(
        args.out,
        f"features-{'-'.join(args.benchmarks)}",
        command=command,
        machine=facts,
        started=started,
        figures=figures,
        details=ctx.details,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
