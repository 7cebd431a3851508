"""The determinism check (docs/workflows.md, Determinism), with real worker processes: a
run started on one version of a workflow's code and resumed by a worker running changed
code fails with NonDeterministic where the replay diverges from the recorded history,
and no step that had succeeded runs again."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgqueue
from tests.apps.basic import EFFECTS_DDL
from tests.apps.flows import app as flows_app
from tests.helpers import WorkerProcess, effect_tags, wait_until

APP = "tests.apps.flows:app"


@pytest.fixture
def flows(dsn: str, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute(EFFECTS_DDL)
    flows_app.configure(dsn=dsn)
    return flows_app


def started_on_v1(dsn: str, app: pgqueue.App, n: int) -> int:
    """A run of flows.deployed that recorded step 'a' on the old code and waits."""
    from tests.apps.flows import deployed

    h = deployed.enqueue(n)
    with WorkerProcess(dsn, APP, env={"FLOWS_CODE": "v1"}).wait_ready():
        wait_until(lambda: app.get_run(h.id).state == "waiting", message="the wait")
    return h.id


def resumed_on(dsn: str, app: pgqueue.App, run_id: int, code: str) -> pgqueue.Run:
    with WorkerProcess(dsn, APP, env={"FLOWS_CODE": code}).wait_ready():
        app.emit_event("flows.go", key=str(run_id))
        wait_until(
            lambda: app.get_run(run_id).state in ("succeeded", "failed"), message="the replay"
        )
    return app.get_run(run_id)


def test_the_same_code_replays_its_history(dsn: str, flows: pgqueue.App) -> None:
    run_id = started_on_v1(dsn, flows, 5)
    run = resumed_on(dsn, flows, run_id, "v1")
    assert (run.state, run.result) == ("succeeded", 6)
    assert effect_tags(dsn, run_id) == ["a", "b"]
    with psycopg.connect(dsn) as c:
        recorded = c.execute(
            "SELECT name, position, call FROM pgqueue.steps WHERE run_id = %s ORDER BY position",
            (run_id,),
        ).fetchall()
    assert [(name, position) for name, position, _ in recorded] == [("a", 0), ("go", 1), ("b", 2)]
    assert recorded[0][2].startswith("tests.apps.flows.effect args#")
    assert recorded[1][2].startswith("ctx.wait_for_event flows.go args#")


@pytest.mark.parametrize(
    ("code", "position", "call"),
    [
        ("args", 0, "tests.apps.flows.effect"),
        ("renamed", 0, "tests.apps.flows.other_effect"),
        ("inserted", 1, "tests.apps.flows.effect"),
    ],
)
def test_a_diverging_replay_fails_with_non_deterministic(
    dsn: str, flows: pgqueue.App, code: str, position: int, call: str
) -> None:
    run_id = started_on_v1(dsn, flows, 5)
    run = resumed_on(dsn, flows, run_id, code)
    assert run.state == "failed" and run.error is not None
    assert run.error.startswith(
        f"NonDeterministic: the replay of run {run_id} diverged from its history at step 'a': "
        "recorded as operation 0 tests.apps.flows.effect args#"
    )
    assert f"now called as operation {position} {call} args#" in run.error
    assert [e["kind"] for e in flows.run_errors(run_id)] == ["non_retryable"]  # not retried
    # step 'a' ran once, on the old code; nothing after the divergence ran
    expected = ["a", "new"] if code == "inserted" else ["a"]
    assert effect_tags(dsn, run_id) == expected


def test_a_call_hashes_json_arguments_and_counts_other_values_by_type() -> None:
    import functools

    from pgqueue.workflows.determinism import step_call

    def ctx_at(attempt: int) -> pgqueue.Context:
        return pgqueue.Context(1, "t", "default", attempt, 3, [], {})

    def fn(*args: Any, **kwargs: Any) -> None: ...

    name = (
        f"{__name__}.test_a_call_hashes_json_arguments_and_counts_other_values_by_type.<locals>.fn"
    )
    # a Context (its attempt differs on every replay) counts by its type
    assert step_call(fn, [ctx_at(1), "x"], {}) == step_call(fn, [ctx_at(2), "x"], {})
    assert step_call(fn, [1], {}).startswith(f"{name} args#")
    assert step_call(fn, [1], {}) != step_call(fn, [2], {})
    assert step_call(fn, [], {"a": 1, "b": 2}) == step_call(fn, [], {"b": 2, "a": 1})
    # a partial's own arguments are the call's
    assert step_call(functools.partial(fn, 1), [2], {}) == step_call(fn, [1, 2], {})
    # keys JSON cannot sort: the types alone, not an error
    assert step_call(fn, [{1: "a", "b": 2}], {}) == step_call(fn, [{2: "c", "d": 3}], {})
