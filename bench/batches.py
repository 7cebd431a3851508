"""What a batch adds to its runs: N runs of an async no-op enqueued (enqueue_many, 1,000
per call) and drained by worker processes, with and without one app.batch() around the
enqueues.

    python -m bench.batches --runs 100000 --repeat 3 --procs 2 --concurrency 50

Each repeat measures both kinds, in alternating order, each on a freshly created and
migrated scratch database. Time = enqueue (wall clock, the batch's seal included) + drain
(max(finished_at) - min(started_at) of the runs, on the database clock; for the batch,
until its callback was enqueued, in the transaction of the last member's completion).
Reported: medians per kind and the ratio of the medians (target <= 1.10).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import psycopg

from bench import batch_apps
from bench.common import DEFAULT_SERVER, ROOT, Scratch, subprocess_env

CHUNK = 1000


def enqueue(dsn: str, n: int, batched: bool) -> float:
    app = batch_apps.app
    app.configure(dsn=dsn)
    items = [[(i,) for i in range(start, min(n, start + CHUNK))] for start in range(0, n, CHUNK)]
    t0 = time.perf_counter()
    if batched:
        with app.batch(on_complete=batch_apps.done):
            for chunk in items:
                batch_apps.member.enqueue_many(chunk)
    else:
        for chunk in items:
            batch_apps.member.enqueue_many(chunk)
    spent = time.perf_counter() - t0
    app.close()
    return spent


def drain(dsn: str, n: int, procs: int, concurrency: int, batched: bool) -> float:
    cmd = [
        sys.executable, "-m", "pgqueue", "worker", "--app", "bench.batch_apps:app",
        "--dsn", dsn, "--queues", batch_apps.QUEUE, "--concurrency", str(concurrency),
        "--log-level", "WARNING",
    ]  # fmt: skip
    workers = [subprocess.Popen(cmd, cwd=ROOT, env=subprocess_env()) for _ in range(procs)]
    done = (
        "SELECT count(*) FROM pgqueue.batches WHERE completed_at IS NOT NULL"
        if batched
        else "SELECT count(*) FROM pgqueue.runs WHERE task = 'bench.batch_member'"
        " AND state = 'succeeded'"
    )
    target = 1 if batched else n
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 600
            while conn.execute(done).fetchone()[0] < target:  # type: ignore[index]
                if time.monotonic() > deadline:
                    raise TimeoutError("the drain took over 600 s")
                time.sleep(0.05)
            row = conn.execute(
                "SELECT extract(epoch FROM max(finished_at) - min(started_at)), count(*)"
                " FROM pgqueue.runs WHERE task = 'bench.batch_member' AND state = 'succeeded'"
            ).fetchone()
            assert row is not None and row[1] == n, row
            return float(row[0])
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(30)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.batches", description=__doc__)
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--procs", type=int, default=2, help="worker processes")
    p.add_argument("--concurrency", type=int, default=50, help="per worker process")
    p.add_argument("--server", default=DEFAULT_SERVER)
    p.add_argument("--db", default="pgqueue_bench_batches")
    args = p.parse_args(argv)
    scratch = Scratch(args.server, args.db)
    times: dict[str, list[float]] = {"plain": [], "batch": []}
    try:
        for r in range(args.repeat):
            kinds = ("plain", "batch") if r % 2 == 0 else ("batch", "plain")
            for kind in kinds:
                dsn = scratch.fresh()
                batched = kind == "batch"
                e = enqueue(dsn, args.runs, batched)
                d = drain(dsn, args.runs, args.procs, args.concurrency, batched)
                times[kind].append(e + d)
                print(f"repeat {r + 1} {kind:5}: enqueue {e:6.2f} s  drain {d:6.2f} s", flush=True)
    finally:
        scratch.drop()
    plain, batch = (statistics.median(times[k]) for k in ("plain", "batch"))
    print(f"median plain {plain:.2f} s, batch {batch:.2f} s: ratio {batch / plain:.3f}")
    print(f"runs/s plain {args.runs / plain:,.0f}, batch {args.runs / batch:,.0f}")


if __name__ == "__main__":
    main()
