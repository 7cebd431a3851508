"""What a batch adds to its runs: N runs of an async no-op enqueued (enqueue_many, 1,000
per call) and drained by worker processes, with and without one app.batch() around the
enqueues.

    python -m bench.batches --runs 100000 --repeat 3 --procs 2 --concurrency 50

Each repeat measures both kinds, in alternating order, each on a freshly created and
migrated scratch database. Time = enqueue (wall clock, the batch's seal included) + drain
(max(finished_at) - min(started_at) of the runs, on the database clock; for the batch,
until its callback was enqueued, in the transaction of the last member's completion).
Reported: medians per kind and the ratio of the medians (target <= 1.10), and the same for
the CPU seconds of the workers and their server backends over the drain (less sensitive
than wall time to other load on a shared machine).

With --waits, a thread samples pg_stat_activity every few milliseconds during each drain
and prints what the scratch database's active backends were waiting on (share of the
samples per wait event; "on CPU" when none), which shows whether completions take turns
on a lock.

With --sql, also what the batch triggers cost the server alone: N member runs and N runs
outside a batch, finished by UPDATEs of --chunk runs per transaction (a completion's
shape, without the worker), the two kinds in alternating chunks; the time per run of each.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter

import psycopg

from bench import batch_apps
from bench.common import DEFAULT_SERVER, ROOT, Scratch, cpu_seconds, subprocess_env

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


class WaitSampler:
    """Samples the wait events of the database's active backends until stopped."""

    def __init__(self, dsn: str, interval: float = 0.005) -> None:
        self.dsn = dsn
        self.interval = interval
        self.counts: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        query = (
            "SELECT coalesce(wait_event_type || ':' || wait_event, 'on CPU')"
            " FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND state = 'active'"
        )
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(self.interval):
                self.samples += 1
                self.counts.update(r[0] for r in conn.execute(query))

    def report(self) -> str:
        total = sum(self.counts.values()) or 1
        top = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in self.counts.most_common(6))
        return f"{self.samples} samples, {total / max(self.samples, 1):.2f} active: {top}"


def drain(
    dsn: str, n: int, procs: int, concurrency: int, batched: bool, waits: bool = False
) -> tuple[float, float]:
    """The drain's seconds (database clock) and the CPU seconds of the workers and of
    their server backends (read before they stop)."""
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
    sampler = WaitSampler(dsn) if waits else contextlib.nullcontext()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn, sampler:
            deadline = time.monotonic() + 600
            while conn.execute(done).fetchone()[0] < target:  # type: ignore[index]
                if time.monotonic() > deadline:
                    raise TimeoutError("the drain took over 600 s")
                time.sleep(0.05)
            backends = [
                r[0]
                for r in conn.execute(
                    "SELECT pid FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ]
            cpu = cpu_seconds([w.pid for w in workers] + backends)
            row = conn.execute(
                "SELECT extract(epoch FROM max(finished_at) - min(started_at)), count(*)"
                " FROM pgqueue.runs WHERE task = 'bench.batch_member' AND state = 'succeeded'"
            ).fetchone()
            assert row is not None and row[1] == n, row
        if isinstance(sampler, WaitSampler):
            print(f"  waits ({'batch' if batched else 'plain'}): {sampler.report()}", flush=True)
        return float(row[0]), cpu
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(30)


def sql_only(dsn: str, n: int, chunk: int) -> tuple[float, float]:
    """Seconds per run of finishing runs outside a batch, and batch members."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgqueue.batch_heads (on_complete, queue, total) VALUES"
            " ('bench.batch_done', %s, %s)",
            (batch_apps.QUEUE, n),
        )
        conn.execute(
            "INSERT INTO pgqueue.runs (task, queue, state, batch_id)"
            " SELECT 't', 'x', 'queued', CASE WHEN g %% 2 = 0 THEN 1 END"
            " FROM generate_series(1, %s) g",
            (2 * n,),
        )
        conn.execute("VACUUM (ANALYZE) pgqueue.runs")
        ids = {
            kind: [r[0] for r in conn.execute(
                f"SELECT id FROM pgqueue.runs WHERE batch_id IS {test} ORDER BY id"
            )]
            for kind, test in (("plain", "NULL"), ("batch", "NOT NULL"))
        }  # fmt: skip
        spent = {"plain": 0.0, "batch": 0.0}
        finish = (
            "UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now() WHERE id = ANY(%s)"
        )
        for i, start in enumerate(range(0, n, chunk)):
            order = ("plain", "batch") if i % 2 == 0 else ("batch", "plain")
            for kind in order:
                t0 = time.perf_counter()
                conn.execute(finish, (ids[kind][start : start + chunk],))
                spent[kind] += time.perf_counter() - t0
        done = conn.execute("SELECT callback_run_id IS NOT NULL FROM pgqueue.batches").fetchone()
        assert done is not None and done[0], "the callback was not enqueued"
    return spent["plain"] / n, spent["batch"] / n


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.batches", description=__doc__)
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--procs", type=int, default=2, help="worker processes")
    p.add_argument("--concurrency", type=int, default=50, help="per worker process")
    p.add_argument("--server", default=DEFAULT_SERVER)
    p.add_argument("--db", default="pgqueue_bench_batches")
    p.add_argument("--sql", action="store_true", help="also the triggers' cost alone")
    p.add_argument("--waits", action="store_true", help="sample wait events in drains")
    p.add_argument("--chunk", type=int, default=100, help="runs per UPDATE with --sql")
    args = p.parse_args(argv)
    scratch = Scratch(args.server, args.db)
    if args.sql:
        costs = [sql_only(scratch.fresh(), args.runs, args.chunk) for _ in range(args.repeat)]
        plain_us = statistics.median(c[0] for c in costs) * 1e6
        batch_us = statistics.median(c[1] for c in costs) * 1e6
        print(
            f"SQL alone, per run finished ({args.chunk} per transaction): outside a batch "
            f"{plain_us:.1f} us, batch member {batch_us:.1f} us (+{batch_us - plain_us:.1f} us)",
            flush=True,
        )
    times: dict[str, list[float]] = {"plain": [], "batch": []}
    cpus: dict[str, list[float]] = {"plain": [], "batch": []}
    try:
        for r in range(args.repeat):
            kinds = ("plain", "batch") if r % 2 == 0 else ("batch", "plain")
            for kind in kinds:
                dsn = scratch.fresh()
                batched = kind == "batch"
                e = enqueue(dsn, args.runs, batched)
                d, cpu = drain(dsn, args.runs, args.procs, args.concurrency, batched, args.waits)
                times[kind].append(e + d)
                cpus[kind].append(cpu)
                print(
                    f"repeat {r + 1} {kind:5}: enqueue {e:6.2f} s  drain {d:6.2f} s"
                    f"  drain CPU {cpu:6.2f} s",
                    flush=True,
                )
    finally:
        scratch.drop()
    plain, batch = (statistics.median(times[k]) for k in ("plain", "batch"))
    print(f"median plain {plain:.2f} s, batch {batch:.2f} s: ratio {batch / plain:.3f}")
    print(f"runs/s plain {args.runs / plain:,.0f}, batch {args.runs / batch:,.0f}")
    cpu_plain, cpu_batch = (statistics.median(cpus[k]) for k in ("plain", "batch"))
    print(
        f"drain CPU (workers + their backends) plain {cpu_plain:.2f} s, batch "
        f"{cpu_batch:.2f} s: ratio {cpu_batch / cpu_plain:.3f}"
    )


if __name__ == "__main__":
    main()
