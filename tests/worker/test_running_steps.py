"""A workflow step's `running` row: written once the step has run a while, from a thread
of its own, while the worker vouches for the lease; first, as the lease check, when not."""

from __future__ import annotations

import os
import threading
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import sql as _sql
from pgqueue.errors import LeaseLost
from pgqueue.workflows.durable import Durable
from pgqueue.workflows.running_steps import RunningSteps
from tests.helpers import wait_until
from tests.worker.parts import FROM_FRONT

WORKER = "00000000-0000-0000-0000-000000000001"


def test_a_step_that_ends_before_it_is_due_is_never_shown() -> None:
    steps = RunningSteps()
    written: list[str] = []
    second = threading.Event()
    quick = steps.show_later(lambda: written.append("quick"), after=0.01)
    quick.done()
    steps.show_later(lambda: (written.append("slow"), second.set()), after=0.02)
    assert second.wait(10), "the second step's row was never written"
    # due first, so it would have been written before the second one
    assert written == ["slow"]


def test_a_step_ends_only_after_a_row_being_written() -> None:
    """done() waits for a `running` row under way: the outcome lands after it."""
    steps = RunningSteps()
    writing, release = threading.Event(), threading.Event()
    order: list[str] = []

    def write() -> None:
        writing.set()
        assert release.wait(10)
        order.append("running")

    shown = steps.show_later(write, after=0)
    assert writing.wait(10)
    ended = threading.Thread(target=lambda: (shown.done(), order.append("outcome")))
    ended.start()
    ended.join(0.2)
    assert ended.is_alive(), "done() returned while the row was being written"
    release.set()
    ended.join(10)
    assert order == ["running", "outcome"]


def _held(app: pgqueue.App, conn: psycopg.Connection[Any]) -> tuple[int, str]:
    @app.task  # what the run is does not matter to its steps' rows
    def flow() -> None: ...

    h = flow.enqueue()
    claim = {"limit": 1, "worker_id": WORKER, "lease_seconds": 30, "finishing": [], **FROM_FRONT}
    row = conn.execute(_sql.query("claim"), {**claim, "queue": "default"}).fetchone()
    assert row is not None and row[0] == h.id
    return h.id, row[8]


def _steps(conn: psycopg.Connection[Any], run_id: int) -> list[tuple[str, str]]:
    return conn.execute(
        "SELECT name, state FROM pgqueue.steps WHERE run_id = %s ORDER BY name", (run_id,)
    ).fetchall()


def test_a_long_step_is_shown_running_while_its_body_runs(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    run_id, token = _held(app, conn)
    durable = Durable(app, run_id, token, 1, has_steps=False, holds=lambda: True)

    def body() -> str:
        wait_until(lambda: _steps(conn, run_id) == [("s", "running")], message="running row")
        return "done"

    assert durable.step("s", body, (), {}) == "done"
    assert _steps(conn, run_id) == [("s", "succeeded")]


@pytest.mark.parametrize("vouched", [False, True])
def test_a_lost_lease_is_found_before_the_body_unless_the_worker_vouches(
    app: pgqueue.App, conn: psycopg.Connection[Any], vouched: bool
) -> None:
    """Not vouched for, the step's `running` row is its lease check: the body does not
    run. Vouched for (the worker heard of no loss, its leases renewed lately), the body
    runs and its outcome finds the loss; nothing is recorded either way."""
    run_id, token = _held(app, conn)
    conn.execute(  # expired: a rescuer may take it
        "UPDATE pgqueue.runs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        (run_id,),
    )
    durable = Durable(app, run_id, token, 1, has_steps=False, holds=lambda: vouched)
    ran: list[bool] = []
    with pytest.raises(LeaseLost, match=f"run {run_id} is no longer held"):
        durable.step("s", lambda: ran.append(True), (), {})
    assert ran == ([True] if vouched else [])
    assert _steps(conn, run_id) == []


# The child only runs RunningSteps (reset at fork) and writes to a pipe: no lock another
# thread of the test session could hold is used there.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_shows_its_steps_with_a_thread_of_its_own() -> None:
    steps = RunningSteps()
    first = threading.Event()
    steps.show_later(first.set, after=0)
    assert first.wait(10)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread did not come along
        shown = threading.Event()
        steps.show_later(shown.set, after=0)
        os.write(write, b"1" if shown.wait(10) else b"0")
        os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1", "the child's step was never shown"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
