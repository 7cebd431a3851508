"""Task code that blocks the worker's event loop costs the worker no lease, and is named."""

from __future__ import annotations

import signal

from tests.apps.blocking import app as blocking_app
from tests.apps.blocking import sleepy
from tests.helpers import WorkerProcess, scalar, wait_until

APP = "tests.apps.blocking:app"


def test_a_blocked_loop_keeps_its_leases_and_names_the_task(dsn: str) -> None:
    """time.sleep(10) in an async task, under a 3 s lease: the lease is renewed from the
    keeper's own thread, so the run runs once and its result is written; the worker's log
    names the task that blocked the loop."""
    blocking_app.configure(dsn=dsn)
    handle = sleepy.enqueue(10)
    with WorkerProcess(dsn, APP, "--lease-seconds", "3").wait_ready() as worker:
        finished = wait_until(
            lambda: scalar(
                dsn,
                "SELECT state FROM pgqueue.runs WHERE id = %s AND state IN ('succeeded', 'failed')",
                (handle.id,),
            ),
            timeout=30,
            message="the run to finish",
        )
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 0
        log = worker.output()
    run = blocking_app.get_run(handle.id)
    assert (finished, run.attempt, run.result) == ("succeeded", 1, "slept"), log
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.run_errors") == 0
    # one warning for the one stall, naming the task and the run
    named = f"by task 'blocking.sleepy' (run {handle.id})"
    warnings = [line for line in log.splitlines() if named in line]
    assert len(warnings) == 1, log
    assert "WARNING" in warnings[0] and "event loop has been blocked" in warnings[0]
