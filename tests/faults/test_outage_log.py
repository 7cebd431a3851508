"""A worker through a server outage logs it as an operator wants it: one WARNING when the
database goes down and one INFO when it is back, however many of its parts (claim loop,
completer, listener, lease keeper, maintenance duties) retry meanwhile, each at DEBUG
(pgqueue.worker._service.Outage). And it recovers: the outcome it could not write during
the outage is written, and a run enqueued afterwards is served. (The server stops in
immediate mode, a crash: a claim commits asynchronously, so the run may be claimed and
executed again, its first outcome fenced out; at-least-once, docs/reliability.md.)
"""

from __future__ import annotations

import logging
import threading

import pytest

import pgqueue
from tests.helpers import InProcessWorker, scalar, wait_until
from tests.private import private_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def parts_retrying(caplog: pytest.LogCaptureFixture) -> set[str]:
    """The parts that logged a retry at DEBUG ("claim: connection lost (...); retrying")."""
    return {
        r.getMessage().split(":", 1)[0]
        for r in caplog.records
        if r.levelno == logging.DEBUG and "; retrying in " in r.getMessage()
    }


def test_an_outage_logs_one_line_down_and_one_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pgqueue")
    with private_server() as server:
        dsn = server.database("outage_log")
        app = pgqueue.App(dsn)
        release = threading.Event()

        @app.task(name="outage.hold")
        def hold(x: int) -> int:
            release.wait(60)
            return x

        try:
            with InProcessWorker(app, concurrency=2, lease_seconds=30):
                held = hold.enqueue(1).id
                wait_until(
                    lambda: (
                        scalar(dsn, "SELECT state FROM pgqueue.runs WHERE id = %s", (held,))
                        == "running"
                    ),
                    message="the run to start",
                )
                caplog.clear()
                server.stop()
                release.set()  # its outcome waits in the completer until the server is back
                wait_until(
                    lambda: (
                        {"completer", "lease keeper"} <= parts_retrying(caplog)
                        and len(parts_retrying(caplog)) >= 4
                    ),
                    30,
                    message="several parts to retry, the completer and lease keeper among them",
                )
                server.start()
                wait_until(
                    lambda: (
                        scalar(dsn, "SELECT state FROM pgqueue.runs WHERE id = %s", (held,))
                        == "succeeded"
                    ),
                    30,
                    message="the outcome kept through the outage to be written",
                )
                after = hold.enqueue(2).id
                wait_until(
                    lambda: (
                        scalar(dsn, "SELECT state FROM pgqueue.runs WHERE id = %s", (after,))
                        == "succeeded"
                    ),
                    30,
                    message="a run enqueued after the outage to be served",
                )
        finally:
            app.close()

    loud = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.levelno >= logging.INFO
        and (r.name.startswith("pgqueue.worker") or "pgqueue-worker-" in r.getMessage())
    ]
    down = [m for level, m in loud if m.startswith("database down")]
    back = [m for level, m in loud if m.startswith("database back")]
    print("worker log lines at INFO and above:", *loud, sep="\n  ")
    print("parts that retried (at DEBUG):", sorted(parts_retrying(caplog)))
    assert len(down) == 1 and len(back) == 1, loud
    assert [level for level, m in loud if m in down] == ["WARNING"]
    assert [level for level, m in loud if m in back] == ["INFO"]
    # nothing else above DEBUG is about the outage: no part logs retries of its own, nor
    # does the worker's pool (psycopg_pool's "error connecting in 'pgqueue-worker-...'")
    assert not [m for level, m in loud if "retrying" in m or "connecting" in m], loud
