"""Benchmark: the claim of a queue with a rate limit it never reaches, and of a queue with
priority aging, against a queue without limits (docs/flow_control.md: what a rate limit
and aging cost their queue's claim).

    python -m bench.rates --repeat 5 --runs 10000 --concurrency 50

Each round drains n queued async no-op runs of (a) a queue without limits (claim.sql),
(r) a queue with rate_limit 1000000/s (claim_rated.sql: claim.sql's scans under the
queue's row lock, the rate log read and written by every claim) and (b2) a queue with
concurrency 1000, never reached (claim_limited(), for reference), the weighted claim
against the plain limited one: (b3) the (b2) queue with its runs in 3 groups, (w) the
same with group weights 3:2:1 (claim_limited()'s stride scheduling), and (g) a queue
with priority_aging 1 s (claim.sql, while the workers' aging pass moves every queued
run one step each second: its worst case), in a shuffled order,
each in a fresh scratch database, with one worker process (bench.features.drain).
Throughput = n / (max(finished_at) - min(started_at)); the ratios (r)/(a), (b2)/(a), (g)/(a)
and (w)/(b3) are taken within each round, and the report gives their medians over the rounds.
Also the SQL alone: claim and complete on one connection (bench.features.drain_sql).
"""

from __future__ import annotations

import argparse
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

from bench import feature_apps as fa
from bench.cases import Context
from bench.common import DEFAULT_SERVER, ROOT, Figure, Scratch, fmt, write_report
from bench.features import configure, drain, drain_sql, load
from bench.run import machine

RATIO_TARGET = 0.85  # a rate limit not reached, aging: at least 0.85x the unlimited claim;
# group weights: at least 0.85x the plain limited claim of the same groups
# key: (queue, label, groups the runs are spread over)
CONFIGS = {
    "a": (fa.FREE_QUEUE, "(a) no limits", 0),
    "r": (fa.RATED_QUEUE, f"(r) rate_limit {fa.RATE_LIMIT}, never reached", 0),
    "b2": (fa.HIGH_LIMIT_QUEUE, f"(b2) concurrency {fa.HIGH_LIMIT}, never reached", 0),
    "b3": (fa.HIGH_LIMIT_QUEUE, f"(b3) concurrency {fa.HIGH_LIMIT}, 3 groups", 3),
    "w": (fa.WEIGHTED_QUEUE, f"(w) concurrency {fa.HIGH_LIMIT}, 3 groups weighted 3:2:1", 3),
    "g": (fa.AGING_QUEUE, f"(g) priority_aging {fa.AGING:g} s", 0),
}
# ratio -> the configuration it compares with
RATIOS = {"r": "a", "b2": "a", "w": "b3", "g": "a"}
QUERIES = {"a": "claim", "r": "claim_rated", "b2": "claim_limited", "b3": "claim_limited",
           "w": "claim_limited", "g": "claim"}  # fmt: skip


def rates(ctx: Context, *, n: int, concurrency: int, cap: float) -> list[Figure]:
    rate = {k: Figure(f"{n:,} async no-op, 1 x c={concurrency}, {label}", "runs/s",
                      command=ctx.command) for k, (_, label, _) in CONFIGS.items()}  # fmt: skip
    ratio = {
        k: Figure(
            f"ratio {CONFIGS[k][1]} / ({base})",
            f"x ({base})",
            target=RATIO_TARGET if k in ("r", "w", "g") else None,
            command=ctx.command,
        )
        for k, base in RATIOS.items()
    }
    sql_rate = {
        k: Figure(f"  SQL only, batch {concurrency}, {label}", "runs/s", command=ctx.command)
        for k, (_, label, _) in CONFIGS.items()
    }
    for r in range(ctx.repeat):
        for k in random.Random(r).sample(list(CONFIGS), len(CONFIGS)):
            queue, label, groups = CONFIGS[k]
            ctx.scratch.fresh()
            with ctx.scratch.connect() as conn:
                configure(conn, queue)
                load(conn, n, task=fa.anoop.name, queue=queue, groups=groups)
            res = drain(ctx.scratch, queue, n, concurrency, 1, cap=cap)
            rate[k].samples.append(res["rate"])
            ctx.log(f"  {label}, round {r + 1}: {fmt(res['rate'])} runs/s")
        for k, base in RATIOS.items():
            ratio[k].samples.append(rate[k].samples[-1] / rate[base].samples[-1])
        for k in random.Random(100 + r).sample(list(CONFIGS), len(CONFIGS)):
            queue, label, groups = CONFIGS[k]
            ctx.scratch.fresh()
            with ctx.scratch.connect() as conn:
                configure(conn, queue)
                load(conn, n, task=fa.anoop.name, queue=queue, groups=groups)
                sql_rate[k].samples.append(drain_sql(conn, queue, concurrency, False, QUERIES[k]))
            ctx.log(f"  SQL only {label}, round {r + 1}: {fmt(sql_rate[k].samples[-1])} runs/s")
    for fig in ratio.values():
        ctx.log(f"{fig.name}: median {statistics.median(fig.samples):.2f}")
    return [*rate.values(), *ratio.values(), *sql_rate.values()]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--runs", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--cap", type=float, default=60.0, help="seconds per drain, max")
    p.add_argument("--server", default=DEFAULT_SERVER)
    p.add_argument("--db", default="pgqueue_bench_rates", help="scratch database (dropped!)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = p.parse_args(argv)
    command = "python -m bench.rates " + shlex.join(argv)
    scratch = Scratch(args.server, args.db)
    ctx = Context(scratch, args.repeat, command, log=lambda s: print(s, flush=True))
    facts = machine(args.server)
    started = time.time()
    try:
        figures = rates(ctx, n=args.runs, concurrency=args.concurrency, cap=args.cap)
    finally:
        scratch.drop()
    write_report(args.out, "rates", command=command, machine=facts, started=started,
                 figures=figures, details=ctx.details)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
