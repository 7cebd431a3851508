"""Tasks for tests/enqueue/test_unique.py, tests/enqueue/test_batches.py and
tests/workflows/test_fanout.py."""

from __future__ import annotations

import sys
import time

import psycopg

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()


@app.task(name="flow.member", max_attempts=1)
def member(n: int, fail_every: int = 0, seconds: float = 0.0) -> int:
    """A batch member: fails (for good) when `fail_every` divides n."""
    if seconds:
        time.sleep(seconds)
    if fail_every and n % fail_every == 0:
        raise pgqueue.NonRetryable(f"member {n} fails")
    return n


@app.task(name="flow.sturdy_member", max_attempts=5)
def sturdy_member(n: int, seconds: float = 0.0) -> int:
    """A batch member with attempts to spare (a SIGKILL of its worker uses one)."""
    time.sleep(seconds)
    return n


@app.task(name="flow.on_batch_done")
def on_batch_done(batch: dict[str, int], tag: str = "") -> None:
    counts = ":".join(str(batch[k]) for k in ("id", "total", "succeeded", "failed", "canceled"))
    record(f"{tag}:{counts}")


@app.task(name="flow.square", max_attempts=5)
def square(n: int, seconds: float = 0.0) -> int:
    time.sleep(seconds)
    if n < 0:
        raise pgqueue.NonRetryable(f"negative: {n}")
    return n * n


@app.workflow(name="flow.fan_out")
def fan_out(
    ctx: pgqueue.Context, numbers: list[int], seconds: float = 0.0, lenient: bool = False
) -> list[object]:
    record(f"fan_out:attempt:{ctx.attempt}", ctx.run_id)
    results = ctx.map("squares", square, [(n, seconds) for n in numbers], return_exceptions=lenient)
    return [r if isinstance(r, int) else f"failed:{r.run_id}" for r in results]


@app.task(name="flow.replaceable", max_attempts=1)
def replaceable(n: int) -> int:
    """Runs until its run is canceled (on_duplicate="cancel_running": a newer enqueue of
    its key replaced it) or the test releases it (a row tagged "release" in `effects`);
    records "started", then "saw-cancel" or "done"."""
    ctx = pgqueue.current()
    record("started", ctx.run_id)
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        while not ctx.cancelled:
            if conn.execute("SELECT 1 FROM effects WHERE tag = 'release'").fetchone():
                record("done", ctx.run_id)
                return n
            time.sleep(0.02)
    record("saw-cancel", ctx.run_id)
    return n


def hammer(key: str, times: int, scope: str, on_duplicate: str = "skip") -> None:
    """Enqueue `flow.member` with one unique key `times` times (database: PGQUEUE_DSN),
    once the test releases advisory lock 7, so that every process starts together;
    prints how many were created and the distinct run ids. With on_duplicate
    "cancel_running", the task is `flow.replaceable`."""
    with psycopg.connect(app.dsn, autocommit=True) as gate:
        gate.execute("SELECT pg_advisory_lock_shared(7)")
    created, ids = 0, set()
    task = replaceable if on_duplicate == "cancel_running" else member
    bound = task.options(unique_key=key, unique_while=scope, on_duplicate=on_duplicate)
    for i in range(times):
        h = bound.enqueue(i)
        created += h.created
        ids.add(h.id)
    app.close()
    print(created, " ".join(map(str, sorted(ids))))


if __name__ == "__main__":
    hammer(sys.argv[1], int(sys.argv[2]), *sys.argv[3:])
