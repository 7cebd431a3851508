"""Failover, short of the chaos suite's scenario 8 (tests/chaos/test_chaos.py, which kills
the primary of a synchronous pair under load): a LISTEN connection that lands on a standby
backs off instead of erroring in a loop, and listens as soon as its server is promoted; a
wait() in progress outlives the primary it started on.

The worker's listener and the waiters' shared connection are given the standby alone
(no target_session_attrs: the case of a DSN naming one host, which happens to be a
standby). PostgreSQL refuses LISTEN there ("cannot execute LISTEN during recovery").
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.runs.handle import RunHandle
from pgqueue.worker.notifications import QUEUED, Listener
from tests.helpers import InProcessWorker
from tests.replication import replicated

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RETRY = re.compile(r"retrying in (\d+\.\d)s")


def retries(caplog: pytest.LogCaptureFixture, prefix: str) -> list[float]:
    """The delays of the log lines starting with `prefix`, in order."""
    return [
        float(m.group(1))
        for r in caplog.records
        if r.getMessage().startswith(prefix) and (m := RETRY.search(r.getMessage()))
    ]


async def listen(dsn: str, seconds: float, notify_from: str | None = None) -> tuple[bool, float]:
    """Run a worker's Listener on `dsn` for `seconds` (or, with `notify_from`, until it
    LISTENs: then a NOTIFY sent there must wake it). Whether it connected, and how long
    the wake-up took."""
    woken = asyncio.Event()

    async def no_limits() -> None:
        return None

    listener = Listener(dsn, None, ["q"], set(), woken.set, lambda *_: None, no_limits)  # type: ignore[arg-type]
    task = asyncio.create_task(listener.run())
    try:
        if notify_from is None:
            await asyncio.sleep(seconds)  # the window the retries are counted in
            return listener.connected.is_set(), 0.0
        await asyncio.wait_for(listener.connected.wait(), seconds)
        woken.clear()  # connecting wakes the producer once: not the wake-up measured
        sent = time.monotonic()
        async with await psycopg.AsyncConnection.connect(notify_from, autocommit=True) as c:
            await c.execute("SELECT pg_notify(%s, 'q')", (QUEUED,))
        await asyncio.wait_for(woken.wait(), 5)
        return True, time.monotonic() - sent
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def outcome(wait: Callable[[], Any]) -> Any:
    """What a waiter thread got: its result, or what it raised (so that a failed assert
    says why)."""
    try:
        return wait()
    except Exception as exc:
        return exc


def test_listeners_back_off_against_a_standby(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pgqueue")
    with replicated() as cluster:
        dsn = cluster.database("standby_listen")
        on_standby = cluster.standby.dsn("standby_listen")

        # The worker's listener: a few tries in 3 s, each further apart, each saying why.
        connected, _ = asyncio.run(listen(on_standby, 3.0))
        assert not connected
        delays = retries(caplog, "listener:")
        assert 2 <= len(delays) <= 6, delays
        assert delays == sorted(delays) and delays[-1] >= 0.8, delays
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("listener:")]
        assert all("no primary" in m and "during recovery" in m for m in lines), lines[:2]
        assert not any(r.exc_info for r in caplog.records), "a traceback was logged"

        # The waiters' shared connection: same backoff; the waiter polls its run itself
        # meanwhile (reads work on a standby) and gets the result the primary wrote.
        caplog.clear()
        producer = pgqueue.App(dsn)
        reader = pgqueue.App(on_standby)

        @producer.task(name="failover.echo")
        def echo(x: int) -> int:
            return x

        try:
            run_id = echo.enqueue(7).id
            result: list[Any] = []
            waiter = threading.Thread(
                target=lambda: result.append(
                    outcome(lambda: RunHandle(run_id, reader).wait(30, 0.2))
                )
            )
            waiter.start()
            time.sleep(2.0)  # the shared connection retries LISTEN meanwhile (pacing)
            with InProcessWorker(producer, concurrency=2):
                waiter.join(30)
            assert result == [7]
            delays = retries(caplog, "waiters:")
            assert 2 <= len(delays) <= 6, delays
            assert delays == sorted(delays), delays
            assert not any(r.exc_info for r in caplog.records), "a traceback was logged"

            # A wait() in progress outlives the primary: while no server takes writes it
            # polls, and it gets the result the new primary's worker writes.
            run_id = echo.enqueue(8).id
            result.clear()
            waiter = threading.Thread(
                target=lambda: result.append(
                    outcome(lambda: RunHandle(run_id, producer).wait(60, 0.2))
                )
            )
            waiter.start()
            cluster.kill_primary()
            time.sleep(1.0)  # no primary for a second (pacing)
            cluster.promote()
            with InProcessWorker(producer, concurrency=2):
                waiter.join(60)
            assert result == [8]
        finally:
            reader.close()
            producer.close()

        # Promoted, the former standby takes LISTEN at the listener's next try.
        connected, woke = asyncio.run(listen(on_standby, 10.0, notify_from=on_standby))
        assert connected and woke < 1.0, woke
