"""Pickup latency through a pooler: how long a run enqueued onto an idle worker waits
before it starts, with the worker and the producer connected directly (NOTIFY), through
PgBouncer in session mode (NOTIFY passes) and through PgBouncer in transaction mode
(`--pooler transaction`: no LISTEN, the worker polls every `--poll-interval`).

    python -m bench.poolers [--server DSN] [--runs 40] [--polls 1,5]

Needs the `pgbouncer` binary (Debian: apt-get install pgbouncer); it runs PgBouncer the
way tests/faults/test_poolers.py does (tests/pgbouncer.py). Runs are enqueued one at a time
through the same connection path as the worker, at random gaps (a tenth of a second
apart for NOTIFY, 0.5 to 1.5 poll intervals apart when polling, so that enqueues fall
anywhere in the poll cycle); pickup = started_at - created_at, both the server's clock.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time
from collections.abc import Iterator

import psycopg

from bench.common import DEFAULT_SERVER, Scratch
from tests import pgbouncer
from tests.apps import pooled
from tests.helpers import WorkerProcess, wait_until

APP = "tests.apps.pooled:app"


@contextlib.contextmanager
def path(dsn: str, mode: str) -> Iterator[str]:
    """The DSN clients use in `mode`: direct, or through PgBouncer."""
    if mode == "direct":
        yield dsn
    else:
        with pgbouncer.running(dsn, mode) as through:
            yield through


def measure(dsn: str, mode: str, poll: float, runs: int) -> list[float]:
    pooler = "none" if mode == "direct" else mode
    with path(dsn, mode) as through:
        args = ["--concurrency", "4", "--poll-interval", str(poll), "--pooler", pooler]
        args += ["--log-level", "WARNING"]
        app = pooled.app
        app.configure(dsn=through, pooler=pooler)
        with WorkerProcess(through, APP, *args) as worker:
            worker.wait_ready(30)
            ids = []
            for i in range(runs):
                gap = random.uniform(0.5, 1.5) * poll if mode == "transaction" else 0.1
                time.sleep(gap)  # pacing: enqueues land anywhere in the poll cycle
                ids.append(pooled.plain.enqueue(i).id)
            wait_until(lambda: settled(dsn, ids), 60, 0.05, "every run to finish")
        app.close()
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT extract(epoch FROM started_at - created_at)::float8 FROM pgqueue.runs"
            " WHERE id = ANY(%s)",
            (ids,),
        ).fetchall()
    return [r[0] for r in rows]


def settled(dsn: str, ids: list[int]) -> bool:
    with psycopg.connect(dsn) as c:
        row = c.execute(
            "SELECT count(*) FROM pgqueue.runs WHERE id = ANY(%s) AND state = 'succeeded'",
            (ids,),
        ).fetchone()
    return bool(row and row[0] == len(ids))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=DEFAULT_SERVER)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--polls", default="1,5", help="transaction mode's poll intervals")
    opts = parser.parse_args()
    dsn = Scratch(opts.server, "pgqueue_bench_poolers").fresh()
    cases = [("direct", 5.0), ("session", 5.0)]
    cases += [("transaction", float(p)) for p in opts.polls.split(",")]
    print("| path | poll interval (s) | runs | pickup p50 (ms) | p95 (ms) | max (ms) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for mode, poll in cases:
        got = sorted(measure(dsn, mode, poll, opts.runs))
        p95 = got[min(len(got) - 1, int(0.95 * len(got)))]
        print(
            f"| {mode} | {poll:g} | {len(got)} | {statistics.median(got) * 1000:.1f} "
            f"| {p95 * 1000:.1f} | {max(got) * 1000:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
