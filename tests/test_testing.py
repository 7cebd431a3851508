"""pgqueue.testing: drain, assert_enqueued, eager mode."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import testing
from tests.helpers import scalar, wait_until


@pytest.fixture
def done() -> list[Any]:
    return []


@pytest.fixture
def tasks(app: pgqueue.App, done: list[Any]) -> dict[str, Any]:
    @app.task(name="add")
    def add(a: int, b: int) -> int:
        done.append(("add", a, b))
        return a + b

    @app.task(name="boom", max_attempts=1)
    def boom(why: str) -> None:
        raise ValueError(why)

    @app.task(name="slow_async")
    async def slow_async(x: int) -> int:
        await asyncio.sleep(0.01)
        return x * 2

    @app.workflow(name="flow")
    def flow(ctx: pgqueue.Context, a: int) -> int:
        total: int = ctx.call("sum", add, a, 1)
        return total * 10

    return {"add": add, "boom": boom, "slow_async": slow_async, "flow": flow}


def test_drain_runs_everything_due_and_reports(
    app: pgqueue.App, tasks: dict[str, Any], done: list[Any]
) -> None:
    ok = tasks["add"].enqueue(1, 2)
    bad = tasks["boom"].enqueue("nope")
    later = tasks["add"].options(delay=3600).enqueue(5, 5)
    flow = tasks["flow"].enqueue(4)
    asynchronous = tasks["slow_async"].enqueue(21)

    counts = testing.drain(app)

    assert counts["succeeded"] >= 4 and counts["failed"] == 1
    assert ok.wait(1) == 3 and flow.wait(1) == 50 and asynchronous.wait(1) == 42
    with pytest.raises(pgqueue.RunFailed, match="ValueError: nope"):
        bad.wait(1)
    assert app.get_run(later.id).state == "scheduled"
    assert ("add", 1, 2) in done and ("add", 5, 5) not in done
    assert testing.drain(app)["claimed"] == 0  # nothing left: returns at once


def test_drain_async_from_a_running_loop(app: pgqueue.App, tasks: dict[str, Any]) -> None:
    async def main() -> Any:
        h = await tasks["slow_async"].enqueue_async(5)
        await testing.drain_async(app)
        return await h.wait_async(1)

    assert asyncio.run(main()) == 10


def test_assert_enqueued_matches_arguments(app: pgqueue.App, tasks: dict[str, Any]) -> None:
    add = tasks["add"]
    h = add.enqueue(1, b=2)
    assert testing.assert_enqueued(app, add, 1, b=2) == h.id
    assert testing.assert_enqueued(app, "add") == h.id  # no arguments: any run of the task
    testing.assert_not_enqueued(app, add, 2, b=1)
    testing.assert_not_enqueued(app, tasks["boom"])
    with pytest.raises(AssertionError) as failure:
        testing.assert_enqueued(app, add, 1, 2)
    message = str(failure.value)
    assert "args=[1, 2] kwargs={}: no such run was enqueued" in message
    assert f"#{h.id} (queued) args=[1] kwargs={{'b': 2}}" in message
    with pytest.raises(AssertionError, match="found run"):
        testing.assert_not_enqueued(app, add)


def test_assert_enqueued_sees_the_callers_joined_transaction(
    app: pgqueue.App, tasks: dict[str, Any], dsn: str
) -> None:
    with psycopg.connect(dsn) as conn:
        app.connection_provider = lambda: conn
        try:
            tasks["add"].enqueue(7, 8)
            testing.assert_enqueued(app, tasks["add"], 7, 8)
            conn.rollback()
        finally:
            app.connection_provider = None
    testing.assert_not_enqueued(app, tasks["add"])


def test_eager_applies_unique_keys_as_to_runs_that_finished_at_once(
    app: pgqueue.App, tasks: dict[str, Any], done: list[Any], dsn: str
) -> None:
    """An inline run is terminal when enqueue returns: the scopes "queued" and "active"
    (and debounce) never hold it, "retained" does (for unique_for seconds if set)."""
    add = tasks["add"]
    with testing.eager(app) as runs:
        for scope in ("queued", "active"):
            bound = add.options(unique_key=f"k-{scope}", unique_while=scope)
            first, again = bound.enqueue(1, 2), bound.enqueue(1, 2)
            assert (first.created, again.created) == (True, True) and first.id != again.id
        debounced = add.options(unique_key="d", debounce=5)
        assert [debounced.enqueue(i, 0).created for i in range(2)] == [True, True]
        retained = add.options(unique_key="r", unique_while="retained")
        kept, dup = retained.enqueue(3, 4), retained.enqueue(5, 6)
        assert (dup.created, dup.id, dup.wait()) == (False, kept.id, 7)
        # the holder is found whatever scope the later enqueue asks for
        assert add.options(unique_key="r").enqueue(0, 0).id == kept.id
        per_item = add.options(unique_key=lambda a, b: f"m{a}", unique_while="retained")
        assert [h.created for h in per_item.enqueue_many([(1, 1), (1, 2), (2, 2)])] == [
            True,
            False,
            True,
        ]
        windowed = add.options(unique_key="w", unique_while="retained", unique_for=0.2)
        first = windowed.enqueue(1, 1)
        assert windowed.enqueue(1, 1).id == first.id  # within the window
        later = wait_until(
            lambda: (h := windowed.enqueue(1, 1)).created and h,
            timeout=5,
            message="the window to pass",
        )
        assert later.id != first.id and windowed.enqueue(1, 1).id == later.id
        assert len(runs) == len(done) == 11
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 0


def test_eager_runs_at_enqueue_without_touching_the_tables(
    app: pgqueue.App, tasks: dict[str, Any], done: list[Any], dsn: str
) -> None:
    with testing.eager(app) as runs:
        h = tasks["add"].enqueue(2, 3)
        assert done == [("add", 2, 3)]
        assert h.id < 0 and h.wait() == 5 and h.get().state == "succeeded"
        assert tasks["slow_async"].enqueue(4).wait() == 8
        testing.assert_enqueued(app, tasks["add"], 2, 3)
        with pytest.raises(ValueError, match="kaput"):
            tasks["boom"].enqueue("kaput")
        keyed = tasks["add"].options(idempotency_key="k").enqueue(1, 1)
        again = tasks["add"].options(idempotency_key="k").enqueue(1, 1)
        assert (keyed.created, again.created, again.id) == (True, False, keyed.id)
        assert [r.state for r in runs] == ["succeeded", "succeeded", "failed", "succeeded"]
        # Workflows cannot run inline (their durable steps need a worker): refused, with
        # what to do, unless asked to enqueue them for real.
        with pytest.raises(testing.EagerRefused, match=r"'flow' is a workflow.*drain\(\)"):
            tasks["flow"].enqueue(1)
        with pytest.raises(testing.EagerRefused, match="'elsewhere' is not registered"):
            app.enqueue_by_name("elsewhere")
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 0
    with testing.eager(app, enqueue_others=True):
        assert tasks["flow"].enqueue(1).id > 0
        assert app.enqueue_by_name("elsewhere").id > 0
    assert scalar(dsn, "SELECT array_agg(task ORDER BY id) FROM pgqueue.runs") == [
        "flow",
        "elsewhere",
    ]
    assert tasks["add"].enqueue(1, 1).id > 0  # eager mode is over


def test_eager_without_propagation_and_from_async_code(
    app: pgqueue.App, tasks: dict[str, Any]
) -> None:
    with testing.eager(app, propagate=False):
        failed = tasks["boom"].enqueue("quiet")
        with pytest.raises(pgqueue.RunFailed, match="ValueError: quiet"):
            failed.wait()

        async def main() -> tuple[Any, Any]:
            a = await tasks["slow_async"].enqueue_async(3)
            b = await tasks["add"].options(queue="other").enqueue_async(1, 2)
            return await a.wait_async(), (await b.get_async()).queue

        assert asyncio.run(main()) == (6, "other")
    with testing.eager(app), pytest.raises(RuntimeError, match="already active"):  # noqa: SIM117
        with testing.eager(app):
            pass
