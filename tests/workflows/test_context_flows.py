"""Workflows that know their run (docs/workflows.md), with real worker processes: step
and call timeouts (the call's durable across a SIGKILL), emit_event as a memoized step, a
step visible while it runs, and durable sleeps and delayed events woken on time."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

import pgqueue
from tests.apps import ctxflows as flows
from tests.apps.basic import EFFECTS_DDL
from tests.helpers import ROOT, WorkerProcess, effect_tags, scalar, wait_until

APP = "tests.apps.ctxflows:app"
DEFAULT = ("--queues", "default")  # never 'nowhere': its runs stay stuck


@pytest.fixture
def flows_app(dsn: str, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute(EFFECTS_DDL)
    flows.app.configure(dsn=dsn)
    return flows.app


def step(dsn: str, run_id: int, name: str) -> dict[str, Any] | None:
    with psycopg.connect(dsn) as c, c.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(
            "SELECT * FROM pgqueue.steps WHERE run_id = %s AND name = %s", (run_id, name)
        ).fetchone()


def test_a_step_times_out_and_the_workflow_sees_timeout_error(
    dsn: str, flows_app: pgqueue.App
) -> None:
    h = flows.step_timeout.enqueue()
    with WorkerProcess(dsn, APP, *DEFAULT).wait_ready():
        assert h.wait(timeout=20) == "fast"
    assert effect_tags(dsn, h.id) == ["step timeout: step 'slow' did not finish within 0.3s"]
    slow = step(dsn, h.id, "slow")
    assert slow is not None and slow["state"] == "failed"
    assert slow["error"] == "TimeoutError: step 'slow' did not finish within 0.3s"


def test_a_call_times_out_durably_across_a_sigkill(dsn: str, flows_app: pgqueue.App) -> None:
    h = flows.call_timeout.enqueue(4)
    with WorkerProcess(dsn, APP, *DEFAULT, "--lease-seconds", "2").wait_ready() as first:
        late = wait_until(lambda: step(dsn, h.id, "late"), message="the second call")
        wait_until(lambda: flows_app.get_run(h.id).state == "waiting", message="the wait")
        assert late["state"] == "waiting"
        first.kill()  # during the wait: the deadline is stored, not this process's
    started = late["created_at"]
    with WorkerProcess(dsn, APP, *DEFAULT, "--lease-seconds", "2").wait_ready():
        result = h.wait(timeout=30)
    message = f"child run {late['output']['run_id']} of step 'late' did not finish within 4s"
    assert result == f"2 TimeoutError: {message}"
    # the attempt that timed out, and the retry (step 'after' failed once) that replayed it
    assert effect_tags(dsn, h.id) == [f"TimeoutError: {message}"] * 2
    assert flows_app.get_run(h.id).attempt == 2
    timed_out = step(dsn, h.id, "late")
    assert timed_out is not None and timed_out["state"] == "failed"
    waited = (timed_out["finished_at"] - started).total_seconds()
    assert 4 <= waited < 8, waited  # from the first call, whatever the kill cost
    child = flows_app.get_run(late["output"]["run_id"])
    assert child.state == "canceled"
    assert child.cancel_reason == f"parent run {h.id} stopped waiting: {message}"


def test_emit_event_is_a_memoized_step(dsn: str, flows_app: pgqueue.App) -> None:
    h = flows.emits.enqueue("k-1")
    with WorkerProcess(dsn, APP, *DEFAULT).wait_ready():
        event_id = h.wait(timeout=20)
    assert flows_app.get_run(h.id).attempt == 2  # the replay did not emit again
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.events WHERE event = 'ctx.told'") == 1
    assert scalar(dsn, "SELECT id FROM pgqueue.events WHERE key = 'k-1'") == event_id
    assert scalar(dsn, "SELECT payload->>'from' FROM pgqueue.events") == str(h.id)


def test_a_running_step_is_visible(dsn: str, flows_app: pgqueue.App) -> None:
    h = flows.shows_step.enqueue()
    with WorkerProcess(dsn, APP, *DEFAULT).wait_ready():
        running = wait_until(
            lambda: (s := step(dsn, h.id, "long one")) and s["state"] == "running" and s,
            message="the running step",
        )
        assert running["started_at"] is not None and running["finished_at"] is None
        shown = subprocess.run(
            [sys.executable, "-m", "pgqueue", "runs", "show", str(h.id), "--dsn", dsn],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        ).stdout
        assert "long one [running] attempt 1 started" in shown
        assert "quick one [succeeded]" in shown
        flows_app.cancel(h.id, reason="seen")
    assert flows_app.get_run(h.id).state == "canceled"


def test_sleeps_and_delayed_events_wake_within_100ms(dsn: str, flows_app: pgqueue.App) -> None:
    n = 20
    with WorkerProcess(dsn, APP, *DEFAULT, "--concurrency", "40").wait_ready():
        waiters = [flows.waiter.enqueue(f"k{i}") for i in range(n)]
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE state = 'waiting'") == n,
            message="every waiter waiting",
        )
        sleepers = [flows.sleeper.enqueue(0.5 + 0.09 * i) for i in range(n)]
        for i in range(n):
            flows_app.emit_event("ctx.tick", key=f"k{i}", payload=i, delay=0.4 + 0.08 * i)
            time.sleep(0.01)  # spread out: each a due time of its own
        assert [w.wait(timeout=20) for w in waiters] == list(range(n))
        assert all(s.wait(timeout=20) == "slept" for s in sleepers)
    # lateness: from the stored due time to the start of the attempt it woke (its claim)
    with psycopg.connect(dsn) as c:
        sleeps = [
            r[0]
            for r in c.execute(
                "SELECT extract(epoch FROM r.started_at - (s.created_at "
                "+ (s.output->>'seconds')::float8 * interval '1 second'))::float8 "
                "FROM pgqueue.steps s JOIN pgqueue.runs r ON r.id = s.run_id "
                "WHERE s.name = 'nap'"
            )
        ]
        events = [
            r[0]
            for r in c.execute(
                "SELECT extract(epoch FROM r.started_at - e.deliver_at)::float8 "
                "FROM pgqueue.runs r JOIN pgqueue.events e ON e.key = r.args->>0 "
                "WHERE r.task = 'ctxflows.waiter'"
            )
        ]
    assert len(sleeps) == n and len(events) == n
    # Woken at the due time, not by the stager's 1 s pass: within 100 ms, but for at most
    # one of each kind that a loaded CI machine delayed (never by as much as that pass).
    for lateness in (sorted(sleeps), sorted(events)):
        assert all(0 <= late < 0.5 for late in lateness), lateness
        assert sum(late >= 0.1 for late in lateness) <= 1, lateness


def test_a_delayed_emit_is_delivered_once_after_its_delay(dsn: str, flows_app: pgqueue.App) -> None:
    waiting = flows.waiter.enqueue("late-1")
    with WorkerProcess(dsn, APP, *DEFAULT).wait_ready():
        wait_until(lambda: flows_app.get_run(waiting.id).state == "waiting", message="the wait")
        emitter = flows.emits_later.enqueue("late-1", 1.5)
        event_id = emitter.wait(timeout=20)
        assert flows_app.get_run(emitter.id).attempt == 2  # the replay did not emit again
        assert waiting.wait(timeout=20) == "later"
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.events WHERE key = 'late-1'") == 1
    delayed = scalar(
        dsn,
        "SELECT extract(epoch FROM deliver_at - created_at)::float8 FROM pgqueue.events "
        "WHERE id = %s",
        (event_id,),
    )
    assert 1.5 <= delayed < 1.6, delayed
    woken = scalar(
        dsn,
        "SELECT extract(epoch FROM r.finished_at - e.deliver_at)::float8 "
        "FROM pgqueue.runs r, pgqueue.events e WHERE r.id = %s AND e.id = %s",
        (waiting.id, event_id),
    )
    assert woken >= 0, "the waiter woke before the event's delivery time"
