"""`async def` workflows (docs/workflows.md, Async workflows), run by real worker
processes: a SIGKILL between steps redoes no finished step, durable sleeps and event
waits free the worker, child runs and fan-out, a timeout and a cancel stop them."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgqueue
from tests.apps import asyncflows as flows
from tests.apps.basic import EFFECTS_DDL
from tests.helpers import WorkerProcess, effect_tags, scalar, wait_until

APP = "tests.apps.asyncflows:app"


@pytest.fixture
def app(dsn: str, conn: psycopg.Connection[Any]) -> Any:
    conn.execute(EFFECTS_DDL)
    flows.app.configure(dsn=dsn)
    yield flows.app
    flows.app.close()


def counts(dsn: str, run_id: int) -> dict[str, int]:
    tags = effect_tags(dsn, run_id)
    return {t: tags.count(t) for t in tags}


def test_a_sigkill_between_steps_redoes_no_finished_step(dsn: str, app: pgqueue.App) -> None:
    h = flows.three_steps.enqueue(100)
    with WorkerProcess(dsn, APP, "--lease-seconds", "2").wait_ready() as first:
        wait_until(lambda: "start:two" in effect_tags(dsn, h.id), message="step two to start")
        first.kill()
    with WorkerProcess(dsn, APP, "--lease-seconds", "2").wait_ready():
        assert h.wait(timeout=30) == 106
    assert counts(dsn, h.id) == {"one": 1, "start:two": 2, "three": 1}
    assert app.get_run(h.id).attempt == 2
    assert [e["kind"] for e in app.run_errors(h.id)] == ["lease_expired"]
    steps = {s["name"]: s["state"] for s in app.run_steps(h.id)}
    assert steps == {"one": "succeeded", "two": "succeeded", "three": "succeeded"}


def test_a_durable_sleep_frees_the_worker(dsn: str, app: pgqueue.App) -> None:
    sleeping = flows.sleeper.enqueue(1.5)
    with WorkerProcess(dsn, APP, "--concurrency", "1").wait_ready():
        wait_until(lambda: app.get_run(sleeping.id).state == "scheduled", message="the sleep")
        other = flows.child.enqueue(4)
        assert other.wait(timeout=5) == 40  # the one slot was free while it slept
        assert app.get_run(sleeping.id).state == "scheduled"
        assert sleeping.wait(timeout=20) == "rested"
    run = app.get_run(sleeping.id)
    assert run.finished_at is not None and run.attempt == 1  # sleeping used no attempt
    assert (run.finished_at - run.created_at).total_seconds() >= 1.5
    assert counts(dsn, sleeping.id) == {"before": 1, "after": 1}


def test_an_event_wakes_the_waiter_and_a_wait_times_out(dsn: str, app: pgqueue.App) -> None:
    paid = flows.waiter.enqueue("order-7", None)
    lonely = flows.waiter.enqueue("nobody", 1.0)
    with WorkerProcess(dsn, APP).wait_ready():
        wait_until(lambda: app.get_run(paid.id).state == "waiting", message="the wait")
        app.emit_event("order.paid", key="order-7", payload={"amount": 5})
        assert paid.wait(timeout=10) == {"amount": 5}
        assert lonely.wait(timeout=15) is None
    assert app.get_run(paid.id).attempt == 1
    assert counts(dsn, paid.id) == {"seen": 1}


def test_calls_maps_and_spawns_children(dsn: str, app: pgqueue.App) -> None:
    h = flows.parent.enqueue(4)
    with WorkerProcess(dsn, APP).wait_ready():
        assert h.wait(timeout=30) == [40, 10, 20, 30]
    steps = {s["name"]: s["state"] for s in app.run_steps(h.id)}
    assert steps == {"double": "succeeded", "many": "succeeded", "fire": "succeeded"}
    children = "SELECT count(*) FROM pgqueue.runs WHERE parent_id = %s"
    assert scalar(dsn, children, (h.id,)) == 5  # each made once, whatever the replays


def test_waits_in_a_task_group_suspend_the_run(dsn: str, app: pgqueue.App) -> None:
    h = flows.together.enqueue(1)
    with WorkerProcess(dsn, APP).wait_ready():
        assert h.wait(timeout=30) == [10, 20]
    children = "SELECT count(*) FROM pgqueue.runs WHERE parent_id = %s"
    assert scalar(dsn, children, (h.id,)) == 2
    assert app.get_run(h.id).attempt == 1  # waiting used no attempt


def test_steps_awaited_together_are_numbered_as_written(dsn: str, app: pgqueue.App) -> None:
    h = flows.gathered.enqueue()
    with WorkerProcess(dsn, APP).wait_ready():
        assert h.wait(timeout=20) == [0, 1, 2, 3, 4]
    with psycopg.connect(dsn) as c:
        steps = dict(c.execute("SELECT name, output FROM pgqueue.steps WHERE run_id = %s", (h.id,)))
    assert steps == {"item": 0, "item#2": 1, "item#3": 2, "item#4": 3, "item#5": 4}


def test_a_timeout_cancels_the_workflow_for_real(dsn: str, app: pgqueue.App) -> None:
    h = flows.stuck.enqueue()
    with WorkerProcess(dsn, APP).wait_ready():
        with pytest.raises(pgqueue.RunFailed, match="timeout of 1s"):
            h.wait(timeout=20)
        wait_until(lambda: "cancelled" in effect_tags(dsn, h.id), message="the cancellation")
    assert counts(dsn, h.id) == {"first": 1, "cancelled": 1}
    assert [e["kind"] for e in app.run_errors(h.id)] == ["timeout"]


def test_a_cancel_stops_the_workflow(dsn: str, app: pgqueue.App) -> None:
    h = flows.hangs.enqueue()
    with WorkerProcess(dsn, APP).wait_ready():
        wait_until(lambda: "first" in effect_tags(dsn, h.id), message="the first step")
        app.cancel(h.id, reason="enough")
        with pytest.raises(pgqueue.RunCanceled):
            h.wait(timeout=10)
        wait_until(lambda: "cancelled" in effect_tags(dsn, h.id), message="the cancellation")
    assert app.get_run(h.id).state == "canceled"


def test_a_sync_operation_on_the_loop_is_refused(dsn: str, app: pgqueue.App) -> None:
    h = flows.blocks.enqueue()
    with WorkerProcess(dsn, APP).wait_ready():
        h.wait(timeout=20)
    [tag] = effect_tags(dsn, h.id)
    assert tag.startswith("a sync durable operation would block the event loop")


def test_a_timeout_is_retried_and_the_retry_succeeds(dsn: str, app: pgqueue.App) -> None:
    h = flows.slow_once.enqueue()
    with WorkerProcess(dsn, APP).wait_ready():
        assert h.wait(timeout=20) == "second time"
    assert app.get_run(h.id).attempt == 2
    assert [e["kind"] for e in app.run_errors(h.id)] == ["timeout"]
    assert counts(dsn, h.id) == {"one": 1, "two": 1}


def test_a_diverging_replay_fails_with_non_deterministic(dsn: str, app: pgqueue.App) -> None:
    h = flows.deployed.enqueue(5)
    with WorkerProcess(dsn, APP, env={"ASYNCFLOWS_CODE": "v1"}).wait_ready():
        wait_until(lambda: app.get_run(h.id).state == "waiting", message="the wait")
    with WorkerProcess(dsn, APP, env={"ASYNCFLOWS_CODE": "args"}).wait_ready():
        app.emit_event("async.go", key=str(h.id))
        with pytest.raises(pgqueue.RunFailed, match=r"NonDeterministic: .* at step 'a'"):
            h.wait(timeout=20)
    assert counts(dsn, h.id) == {"a": 1}
    assert [e["kind"] for e in app.run_errors(h.id)] == ["non_retryable"]
