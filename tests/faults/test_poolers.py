"""pgqueue through a real PgBouncer (1.18, Debian 12's), whose server connections are
cleaned by nothing between clients (server_reset_query empty): whatever session state a
pgqueue connection left behind would reach the next client.

Transaction mode (`--pooler transaction`): no LISTEN (workers and waiters poll), no
prepared statement, no session setting. Session mode (`--pooler session`): NOTIFY on, as
without a pooler, and no session setting either. Each test prints the pickup latency it
measured (docs/scaling.md quotes them)."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.worker.connection import worker_dsn
from tests import pgbouncer
from tests.apps import pooled
from tests.helpers import WorkerProcess, scalar, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

APP = "tests.apps.pooled:app"


@pytest.fixture
def producer() -> Iterator[pgqueue.App]:
    yield pooled.app
    pooled.app.close()


def unfinished(dsn: str) -> int:
    return int(
        scalar(
            dsn,
            "SELECT count(*) FROM pgqueue.runs"
            " WHERE state NOT IN ('succeeded', 'failed', 'canceled')",
        )
    )


def outcomes(dsn: str) -> dict[tuple[str, str, int], int]:
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT task, state, attempt, count(*) FROM pgqueue.runs GROUP BY 1, 2, 3"
        ).fetchall()
    return {(task, state, attempt): n for task, state, attempt, n in rows}


def fresh_clients_inherit_nothing(through: str, clients: int = 8) -> list[tuple[str, int]]:
    """From `clients` new clients of the pooler at once (each in a transaction: each on
    a server connection of its own), plan_cache_mode and how many settings came from a
    SET in some session."""
    conns = [psycopg.connect(through, prepare_threshold=None) for _ in range(clients)]
    try:
        seen = []
        for c in conns:
            mode = c.execute("SHOW plan_cache_mode").fetchone()
            count = c.execute("SELECT count(*) FROM pg_settings WHERE source = 'session'")
            row = count.fetchone()
            assert mode is not None and row is not None
            seen.append((str(mode[0]), int(row[0])))
        return seen
    finally:
        for c in conns:
            c.close()


def pickups(app: pgqueue.App, dsn: str, n: int = 20) -> list[float]:
    """Enqueue-to-start latency of `n` runs enqueued one at a time onto idle workers."""
    ids = []
    for i in range(n):
        handle = pooled.plain.enqueue(i)
        ids.append(handle.id)
        assert handle.wait(timeout=30) == i
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT extract(epoch FROM started_at - created_at)::float8 FROM pgqueue.runs"
            " WHERE id = ANY(%s)",
            (ids,),
        ).fetchall()
    return [r[0] for r in rows]


def quiet(worker: WorkerProcess) -> list[str]:
    """The worker's log lines at WARNING and above (none expected)."""
    return [
        line
        for line in worker.output().splitlines()
        if any(level in line for level in ("WARNING", "ERROR", "CRITICAL", "Traceback"))
    ]


def load(app: pgqueue.App, plain: int, single: int, asyncs: int, flows: int) -> list[Any]:
    """Enqueue the mix (plain in batches of 500, some alone) and wait() for every
    workflow from 8 threads; the workflows' results."""
    for start in range(0, plain, 500):
        pooled.plain.enqueue_many([(i,) for i in range(start, min(plain, start + 500))])
    for i in range(single):
        pooled.plain.enqueue(i)
    pooled.aplain.enqueue_many([(i,) for i in range(asyncs)])
    handles = pooled.flow.enqueue_many([(i,) for i in range(flows)])
    results: list[Any] = [None] * flows
    errors: list[BaseException] = []

    def wait(part: int) -> None:
        try:
            for k in range(part, flows, 8):
                results[k] = handles[k].wait(timeout=300)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wait, args=(p,)) for p in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(400)
    assert not errors, errors[:3]
    return results


def test_transaction_mode(dsn: str, producer: pgqueue.App) -> None:
    """5,000 runs (3,000 plain in batches, 1,000 plain alone, 500 async, 500 workflows
    with two steps, a called child, a spawned child, each waited for with wait()) through
    a transaction-mode pooler: every run succeeds at its first attempt, no statement
    fails, and fresh clients of the pooler inherit no setting."""
    with pgbouncer.running(dsn, "transaction") as through:
        producer.configure(dsn=through, pooler="transaction")
        assert not producer.listens
        args = ["--pooler", "transaction", "--concurrency", "20", "--poll-interval", "0.2"]
        workers = [WorkerProcess(through, APP, *args) for _ in range(2)]
        try:
            for w in workers:
                w.wait_ready(30)
            started = time.monotonic()
            results = load(producer, plain=3000, single=1000, asyncs=500, flows=500)
            wait_until(lambda: unfinished(dsn) == 0, 300, 0.2, "every run to finish")
            took = time.monotonic() - started
            latency = pickups(producer, dsn)
            inherited = fresh_clients_inherit_nothing(through)
            logs = [quiet(w) for w in workers]
        finally:
            for w in workers:
                w.stop()
    assert results == [3 * i + 1 for i in range(500)]
    assert outcomes(dsn) == {
        ("pooled.plain", "succeeded", 1): 3000 + 1000 + 500 + 20,  # + spawned + pickups
        ("pooled.aplain", "succeeded", 1): 500,
        ("pooled.flow", "succeeded", 1): 500,
        ("pooled.child", "succeeded", 1): 500,
    }
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.run_errors") == 0
    assert logs == [[], []]
    assert inherited == [("auto", 0)] * 8
    print(
        f"\ntransaction mode: 6,020 runs in {took:.1f} s; pickup (poll 0.2 s) "
        f"p50 {statistics.median(latency) * 1000:.0f} ms, max {max(latency) * 1000:.0f} ms"
    )


def test_session_mode_with_notify(dsn: str, producer: pgqueue.App) -> None:
    """Through a session-mode pooler with NOTIFY on: workers LISTEN and pick up within
    milliseconds, and still no session setting is left on a server connection."""
    with pgbouncer.running(dsn, "session", pool_size=40) as through:
        producer.configure(dsn=through, pooler="session")
        assert producer.listens
        worker = WorkerProcess(through, APP, "--pooler", "session", "--concurrency", "10")
        try:
            worker.wait_ready(30)
            results = load(producer, plain=500, single=100, asyncs=100, flows=100)
            wait_until(lambda: unfinished(dsn) == 0, 300, 0.2, "every run to finish")
            latency = pickups(producer, dsn)
            producer.close()  # its clients leave: their server connections go to others
            inherited = fresh_clients_inherit_nothing(through)
            logs = quiet(worker)
        finally:
            worker.stop()
    assert results == [3 * i + 1 for i in range(100)]
    assert outcomes(dsn) == {
        ("pooled.plain", "succeeded", 1): 500 + 100 + 100 + 20,
        ("pooled.aplain", "succeeded", 1): 100,
        ("pooled.flow", "succeeded", 1): 100,
        ("pooled.child", "succeeded", 1): 100,
    }
    assert logs == []
    assert inherited == [("auto", 0)] * 8
    assert statistics.median(latency) < 0.1  # NOTIFY, not the 5 s poll
    print(
        f"\nsession mode, NOTIFY on: pickup p50 {statistics.median(latency) * 1000:.1f} ms, "
        f"max {max(latency) * 1000:.1f} ms"
    )


def test_an_undeclared_pooler_gets_no_startup_setting(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker told of no pooler asks for generic plans in its startup packet; PgBouncer
    refuses the parameter, and the worker goes on without it, saying what to set."""
    with pgbouncer.running(dsn, "session") as through:
        assert worker_dsn(through, None) == through
        assert worker_dsn(through, "session") == through
    assert "--pooler session or --pooler transaction" in caplog.text
    assert "plan_cache_mode" in worker_dsn(dsn, None)
