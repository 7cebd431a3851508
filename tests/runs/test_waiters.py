"""The waiters of a process share one connection (pgqueue.runs.waiters): a thousand waits
cost no more connections than one, a finished run wakes its waiter by NOTIFY (not at the
next poll), and a killed shared connection costs latency, never a result."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgqueue
from pgqueue.db import connect as db
from pgqueue.runs import waiters as _waiters
from tests.helpers import InProcessWorker, scalar, wait_until

WAITERS_APP = "pgqueue-test-waiters"


@pytest.fixture
def waiting_app(dsn: str) -> Iterator[pgqueue.App]:
    """An App whose connections say who they are (application_name), to be counted."""
    app = pgqueue.App(make_conninfo(dsn, application_name=WAITERS_APP))
    yield app
    app.close()


def connections(dsn: str) -> int:
    return int(
        scalar(
            dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (WAITERS_APP,),
        )
    )


def listener_pid(dsn: str) -> int | None:
    """The backend of the waiters' shared connection, once it LISTENs."""
    pid = scalar(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        " AND query = 'LISTEN pgqueue_done'",
        (WAITERS_APP,),
    )
    return int(pid) if pid is not None else None


class Peak(threading.Thread):
    """The most connections of WAITERS_APP seen, sampled every 20 ms until stopped."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.peak = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.02):
            self.peak = max(self.peak, connections(self.dsn))

    def __enter__(self) -> Peak:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        self.join(10)


def test_a_thousand_async_waiters_share_one_connection(
    dsn: str, app: pgqueue.App, waiting_app: pgqueue.App
) -> None:
    @waiting_app.task(name="echo")
    def echo_producer(i: int) -> int: ...

    @app.task(name="echo")
    def echo(i: int) -> int:
        return i

    handles = echo_producer.enqueue_many([(i,) for i in range(1000)])
    waiters = _waiters.shared(waiting_app.database)

    async def main() -> list[Any]:
        waits = [asyncio.ensure_future(h.wait_async(timeout=60)) for h in handles]
        await asyncio.to_thread(
            wait_until, lambda: len(waiters._waiting) == 1000, 30, 0.02, "1000 waiters"
        )
        with InProcessWorker(app, concurrency=50):
            return await asyncio.gather(*waits)

    with Peak(dsn) as peak:
        results = asyncio.run(main())
    assert results == list(range(1000))
    # the async pool (pool_size 4) and the shared connection: not one per waiter
    assert 1 <= peak.peak <= waiting_app.pool_size + 1 + 1  # + the sync pool's first
    assert waiters._waiting == {}


def test_threads_waiting_share_it_too(dsn: str, app: pgqueue.App, waiting_app: pgqueue.App) -> None:
    @waiting_app.task(name="echo")
    def echo_producer(i: int) -> int: ...

    @app.task(name="echo")
    def echo(i: int) -> int:
        return i

    handles = echo_producer.enqueue_many([(i,) for i in range(50)])
    results: dict[int, Any] = {}

    def wait(i: int) -> None:
        results[i] = handles[i].wait(timeout=60)

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(50)]
    with Peak(dsn) as peak:
        for t in threads:
            t.start()
        wait_until(
            lambda: len(_waiters.shared(waiting_app.database)._waiting) == 50,
            30,
            message="50 waiters",
        )
        with InProcessWorker(app, concurrency=10):
            for t in threads:
                t.join(60)
    assert results == {i: i for i in range(50)}
    assert peak.peak <= waiting_app.pool_size + 1


def test_a_finished_run_wakes_its_waiter_at_once_not_at_the_next_poll(
    app: pgqueue.App,
) -> None:
    @app.task
    def quick() -> str:
        return "done"

    handle = quick.enqueue()
    with InProcessWorker(app):
        started = time.monotonic()
        assert handle.wait(timeout=20, poll_interval=30) == "done"
    assert time.monotonic() - started < 5  # a poll would have taken 30 s


def test_a_killed_shared_connection_costs_latency_not_a_result(
    dsn: str, app: pgqueue.App, waiting_app: pgqueue.App
) -> None:
    """The shared connection is killed while a waiter waits (poll every 30 s): it comes
    back, LISTENs again, wakes its waiters to look, and the result arrives by NOTIFY."""

    @waiting_app.task(name="slow")
    def slow_producer() -> str: ...

    gate = threading.Event()

    @app.task(name="slow")
    def slow() -> str:
        gate.wait(30)
        return "late"

    handle = slow_producer.enqueue()
    waiters = _waiters.shared(waiting_app.database)
    out: list[Any] = []
    waiter = threading.Thread(target=lambda: out.append(handle.wait(timeout=60, poll_interval=30)))
    with InProcessWorker(app):
        waiter.start()
        wait_until(lambda: waiters._waiting, message="the waiter")
        listening = wait_until(lambda: listener_pid(dsn), message="the LISTEN backend")
        with psycopg.connect(dsn, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (listening,))
        wait_until(lambda: listener_pid(dsn) not in (None, listening), 10, message="a new LISTEN")
        started = time.monotonic()
        gate.set()
        waiter.join(20)
    assert out == ["late"]
    assert time.monotonic() - started < 5


def test_a_run_waited_for_at_once_is_still_claimed_at_once(app: pgqueue.App, dsn: str) -> None:
    """wait() marks its run (sql/watch_run.sql) right after the enqueue, holding the row
    lock for a moment; a claim meeting it skips the run (SKIP LOCKED). The watch announces
    a queued run again, so the worker looks again at once, not at its next poll (30 s)."""

    @app.task
    def quick(i: int) -> int:
        return i

    with InProcessWorker(app, poll_interval=30):
        for i in range(20):
            started = time.monotonic()
            assert quick.enqueue(i).wait(timeout=20) == i
            assert time.monotonic() - started < 5, f"run {i} waited for a poll"


def test_a_run_waited_for_at_once_from_asyncio_is_still_claimed_at_once(
    app: pgqueue.App,
) -> None:
    """The same through wait_async: its batch (sql/watch_runs.sql) announces the queued
    runs it marks, so a worker that skipped one looks again at once."""

    @app.task
    def quick(i: int) -> int:
        return i

    async def one(i: int) -> float:
        started = time.monotonic()
        handle = await quick.enqueue_async(i)
        assert await handle.wait_async(timeout=20) == i
        return time.monotonic() - started

    with InProcessWorker(app, poll_interval=30):
        for i in range(20):
            took = asyncio.run(one(i))
            assert took < 5, f"run {i} waited for a poll"


def test_a_wait_outlasts_a_pool_with_no_free_connection(
    dsn: str, app: pgqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool that cannot hand out a connection in time (here: its only one is taken; in
    production: a server restarting or failing over) is an outage to a waiter: it looks
    again, and gets the result once the pool can serve it."""
    monkeypatch.setattr(db, "POOL_TIMEOUT", 0.2)
    waiting = pgqueue.App(dsn, pool_size=1)

    @waiting.task(name="pool.echo")
    def echo_producer(i: int) -> int: ...

    @app.task(name="pool.echo")
    def echo(i: int) -> int:
        return i

    handle = echo_producer.enqueue(5)
    out: list[Any] = []

    def wait() -> None:
        try:
            out.append(handle.wait(timeout=30, poll_interval=0.05))
        except BaseException as exc:
            out.append(exc)

    waiter = threading.Thread(target=wait)
    try:
        with waiting.connection():  # the pool's only connection, held
            waiter.start()
            time.sleep(1.0)  # pacing: several of the pool's 0.2 s timeouts go by
            assert waiter.is_alive(), out
        with InProcessWorker(app):
            waiter.join(20)
    finally:
        waiting.close()
    assert out == [5]


def test_the_start_of_many_async_waits_is_one_statement_per_batch_not_two_per_wait(
    app: pgqueue.App, waiting_app: pgqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 wait_async() started at once ask for their NOTIFY, and learn which runs ended
    already, in a few batches (sql/watch_runs.sql), where each used to make two round
    trips of its own (watch_run, get_run); each then reads its run once, when woken. Every
    statement of this path takes a connection of the waiting App's async pool: they are
    counted there."""

    @waiting_app.task(name="many.echo")
    def echo_producer(i: int) -> int: ...

    @app.task(name="many.echo")
    def echo(i: int) -> int:
        if i == 13:
            raise ValueError("thirteen")
        return i

    # 10 runs end before anyone waits: the batch, not a NOTIFY, wakes their waiters
    early = echo_producer.enqueue_many([(i,) for i in range(10)])
    with InProcessWorker(app):
        for h in early:
            wait_until(lambda h=h: h.get().state == "succeeded", message=f"run {h.id}")
    handles = early + echo_producer.enqueue_many([(i,) for i in range(10, 200)])
    database = waiting_app.database
    waiters = _waiters.shared(database)
    taken: list[int] = []
    real = database.async_connection

    def counted(conn: Any = None) -> Any:
        taken.append(1)
        return real(conn)

    monkeypatch.setattr(database, "async_connection", counted)

    # the shared listener up before the waits start, as in a process that has waited
    # before: a listener that connects while they start wakes every waiter to look at its
    # run (it may have missed their NOTIFYs), a read each. Run 0 never exists.
    listening = _waiters.ThreadWaiter(0, 1.0)
    waiters.add(listening)
    wait_until(waiters.connected.is_set, 30, 0.02, "the shared listener connected")

    def started() -> bool:
        with waiters._lock:
            found = [w for w in waiters._all() if w is not listening]
        # the 10 early waiters may have returned already
        return len(found) >= 190 and all(w.watched for w in found)

    async def main() -> tuple[list[Any], int]:
        waits = [asyncio.ensure_future(h.wait_async(timeout=60)) for h in handles]
        await asyncio.to_thread(wait_until, started, 30, 0.02, "190 waiters watched")
        at_start = len(taken)
        with InProcessWorker(app, concurrency=20):
            return await asyncio.gather(*waits, return_exceptions=True), at_start

    try:
        results, at_start = asyncio.run(main())
    finally:
        waiters.remove(listening)
    assert results[:13] == list(range(13))
    assert isinstance(results[13], pgqueue.RunFailed)
    assert results[14:] == list(range(14, 200))
    # the start: a few batches (the early runs' waiters read theirs: 10 more), not 400
    assert at_start <= 10 + 10, at_start
    # then a read per woken waiter (a spare few for a backstop poll's wake)
    assert len(taken) <= 200 + 20, len(taken)
    assert waiters._waiting == {}


def test_an_async_wait_at_its_deadline_reads_its_run_before_it_times_out(
    app: pgqueue.App,
) -> None:
    """A wait_async makes no read of its own at its start (the batch does), but it reads
    its run at its deadline: a finished run waited on with timeout=0 is its result, a
    queued one a TimeoutError that names its state, a run that does not exist RunNotFound."""

    @app.task
    def quick(i: int) -> int:
        return i

    done = quick.enqueue(7)
    with InProcessWorker(app):
        wait_until(lambda: done.get().state == "succeeded", message="the run")
    queued = quick.enqueue(8)

    async def main() -> None:
        assert await done.wait_async(timeout=0) == 7
        assert await done.wait_async(timeout=20, poll_interval=30) == 7  # woken by the batch
        with pytest.raises(TimeoutError, match=f"run {queued.id} still queued after 0.2s"):
            await queued.wait_async(timeout=0.2, poll_interval=30)
        with pytest.raises(pgqueue.RunNotFound):
            await pgqueue.RunHandle(999_999, app).wait_async(timeout=20, poll_interval=30)

    asyncio.run(main())


def test_an_async_wait_outlasts_a_pool_with_no_free_connection(
    dsn: str, app: pgqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch that starts a wait_async cannot get a connection (the async pool's only
    one is taken): the waiter is not watched, polls its run, asks again at a later poll,
    and gets the result once the pool can serve it."""
    monkeypatch.setattr(db, "POOL_TIMEOUT", 0.2)
    waiting = pgqueue.App(dsn, pool_size=1)

    @waiting.task(name="apool.echo")
    def echo_producer(i: int) -> int: ...

    @app.task(name="apool.echo")
    def echo(i: int) -> int:
        return i

    handle = echo_producer.enqueue(5)

    async def main() -> Any:
        async with waiting.database.async_connection():  # the async pool's only connection
            wait = asyncio.ensure_future(handle.wait_async(timeout=30, poll_interval=0.05))
            await asyncio.sleep(1.0)  # pacing: several of the pool's 0.2 s timeouts go by
            assert not wait.done()
        with InProcessWorker(app):
            return await wait

    try:
        assert asyncio.run(main()) == 5
    finally:
        waiting.close()
