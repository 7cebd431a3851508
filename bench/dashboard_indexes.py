"""What the dashboard's indexes on pgqueue.runs cost the hot path: enqueue and processing
with and without one set of them (--set): `finished`, migration 0024's two partial
indexes of finished runs (runs_finished_task_idx, runs_finished_queue_idx); `live_task`,
migration 0026's runs_live_task_idx (unfinished runs by task and state); `args`, a GIN
index (jsonb_path_ops) of every run's arguments, which the argument filter would need to
be index-backed (not built: its cost is the answer, bench/RESULTS.md).

    python -m bench.dashboard_indexes [--set finished] [--runs 30000] [--single 2000]
                                      [--repeat 3] [--history 200000]

One scratch database, migrated; --history finished runs in it (so that the indexes have
the size a week of history gives them). Per repeat, the two variants in a shuffled
order, each on an empty backlog: the indexes dropped (`without`) or created (`with`),
then --single enqueues one call (one transaction) each (`Task.enqueue`), --runs runs
enqueued 1,000 per call (`Task.enqueue_many`), and one `pgqueue worker --burst`
(concurrency 50, sync no-op task) drains them: its wall time from start to exit, the
same start-up in both variants. The figures are medians over the repeats.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import time

from bench import apps
from bench.common import DEFAULT_SERVER, Scratch, bulk_load, subprocess_env, worker_command

SETS = {
    "finished": {
        "runs_finished_task_idx": "CREATE INDEX runs_finished_task_idx ON pgqueue.runs "
        "(task, finished_at, id) WHERE state IN ('succeeded', 'failed', 'canceled')",
        "runs_finished_queue_idx": "CREATE INDEX runs_finished_queue_idx ON pgqueue.runs "
        "(queue, finished_at, id) WHERE state IN ('succeeded', 'failed', 'canceled')",
    },
    "live_task": {
        "runs_live_task_idx": "CREATE INDEX runs_live_task_idx ON pgqueue.runs "
        "(task, state, id) WHERE state IN ('scheduled', 'queued', 'running', 'waiting')",
    },
    "args": {
        "runs_args_bench_idx": "CREATE INDEX runs_args_bench_idx ON pgqueue.runs "
        "USING gin ((args || kwargs) jsonb_path_ops)",
    },
}


def set_indexes(scratch: Scratch, indexes: dict[str, str], present: bool) -> None:
    with scratch.connect() as conn:
        for name, create in indexes.items():
            conn.execute(f"DROP INDEX IF EXISTS pgqueue.{name}")
            if present:
                conn.execute(create)
        conn.execute("DELETE FROM pgqueue.runs WHERE state <> 'succeeded' OR task <> 'history'")
        conn.execute("VACUUM ANALYZE pgqueue.runs")


def one(scratch: Scratch, runs: int, single: int) -> tuple[float, float, float]:
    """(single enqueues/s, bulk enqueues/s, runs processed/s)."""
    apps.app.configure(dsn=scratch.dsn)
    try:
        t0 = time.perf_counter()
        for i in range(single):
            apps.noop.enqueue(i)
        single_rate = single / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for start in range(0, runs, 1000):
            apps.noop.enqueue_many([(i,) for i in range(start, min(runs, start + 1000))])
        bulk_rate = runs / (time.perf_counter() - t0)
    finally:
        apps.app.close()
    cmd = worker_command(scratch.dsn, "bench", 50, burst=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=subprocess_env(), cwd=os.getcwd())
    process_rate = (runs + single) / (time.perf_counter() - t0)
    return single_rate, bulk_rate, process_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=DEFAULT_SERVER)
    parser.add_argument("--set", choices=sorted(SETS), default="finished")
    parser.add_argument("--runs", type=int, default=30_000)
    parser.add_argument("--single", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--history", type=int, default=200_000)
    args = parser.parse_args()
    scratch = Scratch(args.server, "pgqueue_bench_indexes")
    scratch.fresh()
    with scratch.connect() as conn:
        bulk_load(conn, args.history, task="history", state="succeeded")
    results: dict[str, list[tuple[float, float, float]]] = {"with": [], "without": []}
    for r in range(args.repeat):
        order = ["with", "without"]
        random.shuffle(order)
        for variant in order:
            set_indexes(scratch, SETS[args.set], variant == "with")
            figures = one(scratch, args.runs, args.single)
            results[variant].append(figures)
            print(
                f"repeat {r + 1} {variant:<8} single {figures[0]:8.0f}/s  "
                f"bulk {figures[1]:8.0f}/s  processed {figures[2]:8.0f}/s",
                flush=True,
            )
    print(f"{'indexes':<10} {'single enqueue/s':>17} {'bulk enqueue/s':>15} {'processed/s':>12}")
    for variant, rows in results.items():
        med = [statistics.median(r[i] for r in rows) for i in range(3)]
        print(f"{variant:<10} {med[0]:17.0f} {med[1]:15.0f} {med[2]:12.0f}")
    scratch.drop()


if __name__ == "__main__":
    main()
