"""Workflows started by events: @app.workflow(on_event=...) gets one run per event
emitted through the App, in the emitter's transaction, exactly once per event."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.tasks.task import EVENT_RUN_KEY
from tests.apps.basic import EFFECTS_DDL
from tests.apps.subscribed import app as subscribed_app
from tests.helpers import ROOT, WorkerProcess, scalar

APP = "tests.apps.subscribed:app"


@pytest.fixture
def subscribed(dsn: str, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute(EFFECTS_DDL)
    subscribed_app.configure(dsn=dsn)
    return subscribed_app


def event_runs(dsn: str) -> list[tuple[str, Any, str]]:
    with psycopg.connect(dsn) as c:
        return c.execute(  # type: ignore[return-value]
            "SELECT task, args, idempotency_key FROM pgqueue.runs"
            " WHERE idempotency_key LIKE 'pgqueue.event:%' ORDER BY task, id"
        ).fetchall()


def test_an_event_starts_each_subscribed_workflow_once(dsn: str, subscribed: pgqueue.App) -> None:
    event_id = subscribed.emit_event("order.paid", payload={"order": 7, "items": [2, 3]})
    runs = event_runs(dsn)
    payload = [{"order": 7, "items": [2, 3]}]
    assert runs == [
        (
            "subscribed.fulfil",
            payload,
            EVENT_RUN_KEY.format(event_id=event_id, task="subscribed.fulfil"),
        ),
        (
            "subscribed.receipt",
            payload,
            EVENT_RUN_KEY.format(event_id=event_id, task="subscribed.receipt"),
        ),
    ]
    subscribed.emit_event("order.shipped", payload={"order": 7})  # nobody subscribes
    assert len(event_runs(dsn)) == 2
    with WorkerProcess(dsn, APP, "--burst") as w:
        assert w.wait(timeout=60) == 0, w.output()
    results = dict(
        psycopg.connect(dsn)
        .execute("SELECT task, result FROM pgqueue.runs WHERE state = 'succeeded'")
        .fetchall()
    )
    assert results == {"subscribed.fulfil": 5, "subscribed.receipt": "receipt for order 7"}


def test_the_runs_commit_and_roll_back_with_the_emitter(dsn: str, subscribed: pgqueue.App) -> None:
    with psycopg.connect(dsn) as c:
        subscribed.emit_event("order.paid", payload={"order": 1, "items": []}, conn=c)
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 0  # not committed yet
        c.rollback()
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.events") == 0
    assert event_runs(dsn) == []
    with psycopg.connect(dsn) as c:
        subscribed.emit_event("order.paid", payload={"order": 2, "items": []}, conn=c)
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.events") == 1
    assert len(event_runs(dsn)) == 2


def test_a_workflow_emits_once_whatever_its_replays(dsn: str, subscribed: pgqueue.App) -> None:
    from tests.apps.subscribed import checkout

    h = checkout.enqueue(40)
    with WorkerProcess(dsn, APP).wait_ready():
        assert h.wait(timeout=30) == 40
        tasks = [t for t, _, _ in event_runs(dsn)]
        assert tasks == ["subscribed.fulfil", "subscribed.receipt"]
        key = EVENT_RUN_KEY.format(event_id="%", task="subscribed.fulfil")
        fulfil = scalar(dsn, "SELECT id FROM pgqueue.runs WHERE idempotency_key LIKE %s", (key,))
        assert pgqueue.RunHandle(fulfil, subscribed).wait(timeout=30) == 41
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.events") == 1


def test_events_from_four_processes_start_exactly_one_run_per_subscriber(
    dsn: str, subscribed: pgqueue.App
) -> None:
    """1,000 events of one name, emitted by 4 processes at once, with 2 subscribers:
    exactly 2,000 runs, two per event, one of each workflow."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.apps.subscribed", dsn, "250"],
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        for _ in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.events") == 1000
    per_event = scalar(
        dsn,
        "SELECT array_agg(DISTINCT tasks) FROM (SELECT array_agg(task ORDER BY task)::text"
        " AS tasks FROM pgqueue.runs GROUP BY split_part(idempotency_key, ':', 2)) e",
    )
    assert per_event == ["{subscribed.fulfil,subscribed.receipt}"]
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 2000
    assert scalar(dsn, "SELECT count(DISTINCT idempotency_key) FROM pgqueue.runs") == 2000


def test_subscriptions_are_checked_when_declared() -> None:
    app = pgqueue.App()
    with pytest.raises(TypeError, match=r"on_event= is for @app\.workflow"):
        app.task(on_event="x")(lambda: None)
    with pytest.raises(TypeError, match=r"must take the event's payload as its one argument"):

        @app.workflow(on_event="x")
        def two(ctx: pgqueue.Context, a: int, b: int) -> None: ...

    with pytest.raises(pgqueue.errors.OutOfRange, match="event name"):
        app.workflow(on_event="")(lambda ctx, p: None)
