"""A real HA manager (issue 47, point 5): pg_auto_failover (tests/faults/autofailover.py)
fails the primary over under load, the old primary rejoins as the secondary, and it fails
back. A producer enqueues all along and two `pgqueue worker` processes serve, all through
the multi-host DSN (target_session_attrs=read-write), none restarted by hand. Then:
every acknowledged enqueue exists and succeeded, the history checker finds no violation
over the whole history, and it counts the re-executions (runs whose attempt was cut off
by a failover and ran again).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import psycopg
import pytest

import pgqueue
from pgqueue.db import migrate
from tests.chaos import app as chaos
from tests.faults.autofailover import formation
from tests.helpers import WorkerProcess, scalar, wait_until
from tests.history import Started, check, collect, report

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

APP = "tests.chaos.app:app"
OPTIONS = ("--queues", "chaos", "--concurrency", "4", "--lease-seconds", "10")


class Producer(threading.Thread):
    """Enqueues `chaos.work` runs, about 20 a second, until stopped; keeps what was
    acknowledged (wall time, run id) and counts what was refused (during a failover)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.app = pgqueue.App(dsn)
        self.acknowledged: list[tuple[float, int]] = []
        self.refused = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            n += 1
            try:
                run = self.app.enqueue_by_name("chaos.work", (f"h{n}", 0.05), queue="chaos")
            except (pgqueue.DatabaseUnavailable, psycopg.Error):
                self.refused += 1
            else:
                self.acknowledged.append((time.time(), run.id))
            self.stopped.wait(0.05)  # pacing: a steady load, not a flood

    def more(self, n: int, timeout: float = 60) -> None:
        """Wait until `n` more enqueues are acknowledged."""
        target = len(self.acknowledged) + n
        wait_until(lambda: len(self.acknowledged) >= target, timeout, 0.05, f"{n} enqueues")


def test_failover_and_failback_under_load_lose_nothing() -> None:
    with formation() as f, contextlib.ExitStack() as stack:
        with psycopg.connect(f.dsn("postgres"), autocommit=True) as c:
            c.execute("CREATE DATABASE pgq_ha")
        dsn = f.dsn("pgq_ha")
        migrate.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(chaos.DDL)
            collect.install(c)
        workers = [
            stack.enter_context(WorkerProcess(dsn, APP, *OPTIONS)).wait_ready() for _ in range(2)
        ]
        producer = Producer(dsn)
        stack.callback(producer.app.close)
        producer.start()
        try:
            producer.more(40)
            first = f.failover()  # node1 -> node2; node1 rejoins as the secondary
            producer.more(40)
            back = f.failover()  # and back
            producer.more(40)
        finally:
            producer.stopped.set()
            producer.join(30)
        ids = [run for _, run in producer.acknowledged]
        wait_until(
            lambda: (
                scalar(
                    dsn,
                    "SELECT count(*) FROM pgqueue.runs"
                    " WHERE state NOT IN ('succeeded', 'failed', 'canceled')",
                )
                == 0
            ),
            120,
            0.2,
            "every run to finish",
        )
        succeeded = scalar(
            dsn,
            "SELECT count(*) FROM pgqueue.runs WHERE id = ANY(%s) AND state = 'succeeded'",
            (ids,),
        )
        assert all(w.proc.poll() is None for w in workers), "a worker exited"
        for w in workers:
            w.signal(signal.SIGTERM)
        assert [w.wait(60) for w in workers] == [0, 0]

        history = collect.read(dsn, {"chaos": (None, None)}, producer.acknowledged)
        violations = check(history)
        started: dict[int | None, int] = {}
        for e in history.of(Started):
            started[e.run] = started.get(e.run, 0) + 1
        reexecuted = sum(n - 1 for n in started.values())
        print(
            f"failover {first:.1f}s, failback {back:.1f}s; {len(ids)} enqueues acknowledged, "
            f"{succeeded} of them succeeded, {producer.refused} refused during the failovers; "
            f"re-executions: {reexecuted}"
        )
        print(report(violations, history))
        assert succeeded == len(ids)
        assert not violations, report(violations, history)
