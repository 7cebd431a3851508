"""Durable workflows, run by real worker processes."""

from __future__ import annotations

import re
import signal
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.ops.inspect import wait_text
from tests.apps.basic import EFFECTS_DDL
from tests.apps.flows import app as flows_app
from tests.helpers import WorkerProcess, scalar, wait_until

APP = "tests.apps.flows:app"


@pytest.fixture
def flows(dsn: str, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute(EFFECTS_DDL)
    flows_app.configure(dsn=dsn)
    return flows_app


def effects(dsn: str, run_id: int | None = None) -> dict[str, int]:
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT tag, count(*) FROM effects WHERE run_id = %s OR %s::bigint IS NULL "
            "GROUP BY tag",
            (run_id, run_id),
        ).fetchall()
    return dict(rows)


def state(app: pgqueue.App, run_id: int) -> str:
    return app.get_run(run_id).state


def test_failed_step_retries_without_redoing_earlier_steps(dsn: str, flows: pgqueue.App) -> None:
    from tests.apps.flows import four_steps

    h = four_steps.enqueue(100)
    with WorkerProcess(dsn, APP).wait_ready():
        assert h.wait(timeout=20) == 110
    assert effects(dsn, h.id) == {"one": 1, "two": 1, "three": 2, "four": 1}
    assert flows.get_run(h.id).attempt == 2
    steps = {s["name"]: s["state"] for s in flows.run_steps(h.id)}
    assert steps == {
        "one": "succeeded",
        "two": "succeeded",
        "three": "succeeded",
        "four": "succeeded",
    }


def test_sigkill_during_step_two_does_not_redo_step_one(dsn: str, flows: pgqueue.App) -> None:
    from tests.apps.flows import slow_step_two

    h = slow_step_two.enqueue()
    with WorkerProcess(dsn, APP, "--lease-seconds", "2").wait_ready() as first:
        wait_until(lambda: effects(dsn, h.id).get("start:two"), message="step two to start")
        first.kill()
    with WorkerProcess(dsn, APP, "--lease-seconds", "2").wait_ready():
        assert h.wait(timeout=30) == "done"
    assert effects(dsn, h.id) == {"one": 1, "start:two": 2}
    run = flows.get_run(h.id)
    assert run.attempt == 2
    assert [e["kind"] for e in flows.run_errors(h.id)] == ["lease_expired"]


def test_durable_sleep_frees_the_worker(dsn: str, flows: pgqueue.App) -> None:
    from tests.apps.flows import noop, sleeper

    sleeping = sleeper.enqueue(2.0)
    with WorkerProcess(dsn, APP, "--concurrency", "1").wait_ready():
        wait_until(lambda: state(flows, sleeping.id) == "scheduled", message="the sleep")
        other = noop.enqueue()
        assert other.wait(timeout=5) == "noop"
        assert state(flows, sleeping.id) == "scheduled"  # still asleep, worker was free
        assert sleeping.wait(timeout=20) == "rested"
    run = flows.get_run(sleeping.id)
    assert run.finished_at is not None and other.get().finished_at is not None
    assert other.get().finished_at < run.finished_at
    assert (run.finished_at - run.created_at).total_seconds() >= 2.0
    assert run.attempt == 1  # sleeping used no attempt
    assert effects(dsn, sleeping.id) == {"before": 1, "after": 1}


def test_event_wakes_waiter_within_100ms(dsn: str, flows: pgqueue.App) -> None:
    from tests.apps.flows import waiter

    h = waiter.enqueue("order-42", 60)
    with WorkerProcess(dsn, APP).wait_ready():
        wait_until(lambda: state(flows, h.id) == "waiting", message="the wait")
        event_id = flows.emit_event("order.paid", key="order-42", payload={"amount": 5})
        assert h.wait(timeout=10) == {"amount": 5}
    lag = scalar(
        dsn,
        "SELECT extract(epoch FROM r.finished_at - e.created_at) "
        "FROM pgqueue.runs r, pgqueue.events e WHERE r.id = %s AND e.id = %s",
        (h.id, event_id),
    )
    assert lag < 0.1, f"resumed {lag * 1000:.0f} ms after the event"


def test_wait_times_out_with_none_and_two_waiters_both_wake(dsn: str, flows: pgqueue.App) -> None:
    from tests.apps.flows import waiter

    lonely = waiter.enqueue("nobody", 1.0)
    a, b = waiter.enqueue("shared", None), waiter.enqueue("shared", None)
    with WorkerProcess(dsn, APP).wait_ready():
        wait_until(
            lambda: state(flows, a.id) == state(flows, b.id) == "waiting", message="both waits"
        )
        assert lonely.wait(timeout=15) is None
        flows.emit_event("order.paid", key="shared", payload="yes")
        assert a.wait(timeout=10) == "yes" and b.wait(timeout=10) == "yes"
    assert flows.get_run(lonely.id).attempt == 1
    # What each finished wait was for stays with its step, beside what it returned.
    [gave_up], [received] = flows.run_steps(lonely.id), flows.run_steps(a.id)
    assert gave_up["waited"] == {"event": "order.paid", "key": "nobody", "timeout": 1.0}
    assert received["waited"] == {"event": "order.paid", "key": "shared", "timeout": None}
    assert re.fullmatch(r"event order.paid key nobody: timed out after \S+ s", wait_text(gave_up))
    assert re.fullmatch(r"event order.paid key shared: received after \S+ m?s", wait_text(received))


def test_call_and_spawn_children_are_idempotent(dsn: str, flows: pgqueue.App) -> None:
    from tests.apps.flows import parent

    h = parent.enqueue(4)
    with WorkerProcess(dsn, APP).wait_ready():
        assert h.wait(timeout=20) == 41
    children = scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE parent_id = %s", (h.id,))
    assert children == 2  # one called, one spawned, despite the parent's retry
    assert flows.get_run(h.id).attempt == 2
    assert effects(dsn) == {"child": 1}


def test_failed_child_raises_in_parent(dsn: str, flows: pgqueue.App) -> None:
    from tests.apps.flows import parent_of_bad

    h = parent_of_bad.enqueue()
    with WorkerProcess(dsn, APP).wait_ready():
        assert h.wait(timeout=20) == "caught: ValueError: child broke"


def test_non_json_step_result_fails_the_run_cleanly(dsn: str, flows: pgqueue.App) -> None:
    from tests.apps.flows import non_json_step

    h = non_json_step.enqueue()
    with WorkerProcess(dsn, APP).wait_ready(), pytest.raises(pgqueue.RunFailed) as info:
        h.wait(timeout=20)
    run = info.value.run
    assert run.attempt == 1
    assert "makes_object" in (run.error or "") and "JSON" in (run.error or "")


def test_repeated_step_names_are_numbered(dsn: str, flows: pgqueue.App) -> None:
    from tests.apps.flows import loop

    h = loop.enqueue(3)
    with WorkerProcess(dsn, APP).wait_ready():
        assert h.wait(timeout=20) == [0, 1, 2]
    assert sorted(s["name"] for s in flows.run_steps(h.id)) == ["item", "item#2", "item#3"]


def test_cancel_waiting_workflow_with_children(dsn: str, flows: pgqueue.App) -> None:
    from tests.apps.flows import waits_on_child

    h = waits_on_child.enqueue()
    with WorkerProcess(dsn, APP).wait_ready():
        child_id = wait_until(
            lambda: scalar(
                dsn,
                "SELECT id FROM pgqueue.runs WHERE parent_id = %s AND state = 'waiting'",
                (h.id,),
            ),
            message="the child to wait",
        )
        wait_until(lambda: state(flows, h.id) == "waiting", message="the parent to wait")
        assert flows.cancel(h.id, children=True)
    assert state(flows, h.id) == "canceled"
    assert state(flows, child_id) == "canceled"


def test_worker_kill_signal_is_not_needed_for_cleanup(dsn: str, flows: pgqueue.App) -> None:
    """A SIGTERMed idle worker exits 0 and deregisters."""
    w = WorkerProcess(dsn, APP).wait_ready()
    with w:
        w.signal(signal.SIGTERM)
        assert w.wait(20) == 0
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.workers") == 0


def test_an_event_wait_on_a_key_over_512_bytes_fails_its_run(dsn: str, flows: pgqueue.App) -> None:
    """The key would be stored in runs_wait_event_idx: refused before the wait begins."""
    from tests.apps.flows import waiter

    h = waiter.options(max_attempts=1).enqueue("k" * 600, 60)
    with WorkerProcess(dsn, APP).wait_ready(), pytest.raises(pgqueue.RunFailed) as info:
        h.wait(timeout=20)
    assert "event key is 600 bytes in UTF-8, over the 512-byte limit" in (
        info.value.run.error or ""
    )
    assert flows.run_steps(h.id) == []


def children_of(dsn: str, run_id: int) -> list[int]:
    with psycopg.connect(dsn) as c:
        rows = c.execute("SELECT id FROM pgqueue.runs WHERE parent_id = %s ORDER BY id", (run_id,))
        return [r[0] for r in rows]


def test_a_child_that_disappeared_fails_the_parent_with_child_missing(
    dsn: str, flows: pgqueue.App
) -> None:
    from tests.apps.flows import calls_missing, maps_missing

    called, mapped = calls_missing.enqueue(), maps_missing.enqueue()
    with WorkerProcess(dsn, APP).wait_ready():
        wait_until(lambda: len(children_of(dsn, called.id)) == 1, message="the call's child")
        wait_until(lambda: len(children_of(dsn, mapped.id)) == 2, message="the map's children")
        wait_until(
            lambda: state(flows, called.id) == state(flows, mapped.id) == "waiting",
            message="both parents waiting",
        )
        [gone] = children_of(dsn, called.id)
        first, last = children_of(dsn, mapped.id)
        with psycopg.connect(dsn, autocommit=True) as c:  # as an operator's DELETE would
            c.execute("DELETE FROM pgqueue.runs WHERE id = ANY(%s)", ([gone, first],))
        flows.cancel(last)  # wakes the map's parent, which finds its first child gone
        with pytest.raises(pgqueue.RunFailed) as call_info:
            called.wait(timeout=20)
        with pytest.raises(pgqueue.RunFailed) as map_info:
            mapped.wait(timeout=20)
    assert f"ChildMissing: child run {gone} of step 'long' (parent run {called.id})" in str(
        call_info.value
    )
    assert f"ChildMissing: child run {first} of step 'many'" in str(map_info.value)
    for h in (called, mapped):  # not retried: a replay would find it missing again
        run = flows.get_run(h.id)
        assert run.attempt == 1 and run.max_attempts == 3
        assert [e["kind"] for e in flows.run_errors(h.id)] == ["non_retryable"]
