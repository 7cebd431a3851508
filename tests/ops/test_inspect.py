"""Inspection alone (pgqueue.ops.inspect), on a connection to a real database: one run, runs
by filter, and the summaries behind `pgqueue queues` and `pgqueue workers`."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.ops import inspect as _inspect
from pgqueue.runs import read as _read

Conn = psycopg.Connection[Any]


def test_get_run_reads_the_row_or_says_it_is_not_found(app: pgqueue.App, conn: Conn) -> None:
    handle = app.enqueue_by_name("inspect.send", [1], {"to": "a"}, queue="mail")
    run = _read.get_run(conn, handle.id)
    assert (run.id, run.task, run.queue, run.state) == (handle.id, "inspect.send", "mail", "queued")
    assert (run.args, run.kwargs) == ([1], {"to": "a"})
    with pytest.raises(pgqueue.RunNotFound, match="may have been pruned"):
        _read.get_run(conn, handle.id + 1000)
    with pytest.raises(pgqueue.RunNotFound, match="64-bit"):
        _read.get_run(conn, -(2**63) - 1)


def test_list_runs_filters_and_puts_the_newest_first(app: pgqueue.App, conn: Conn) -> None:
    a = app.enqueue_by_name("inspect.a", queue="q1").id
    b = app.enqueue_by_name("inspect.b", queue="q2").id
    c = app.enqueue_by_name("inspect.a", queue="q2", delay=3600).id

    def ids(**filters: Any) -> list[int]:
        found = _inspect.list_runs(
            conn,
            state=filters.get("state"),
            queue=filters.get("queue"),
            task=filters.get("task"),
            limit=filters.get("limit", 50),
        )
        return [r.id for r in found]

    assert ids() == [c, b, a]
    assert ids(limit=2) == [c, b]
    assert ids(queue="q2") == [c, b]
    assert ids(task="inspect.a") == [c, a]
    assert ids(state="scheduled") == [c]
    assert ids(state="queued", queue="q2") == [b]


def test_queue_summary_counts_runs_by_state(app: pgqueue.App, conn: Conn) -> None:
    app.enqueue_by_name("inspect.a", queue="mail")
    app.enqueue_by_name("inspect.a", queue="mail")
    app.enqueue_by_name("inspect.a", queue="mail", delay=3600)
    summary = {row["queue"]: row for row in _inspect.rows(conn, "queue_summary")}
    assert (summary["mail"]["queued"], summary["mail"]["scheduled"]) == (2, 1)
    assert summary["mail"]["paused"] is False


def test_no_worker_no_errors_no_steps(app: pgqueue.App, conn: Conn) -> None:
    run_id = app.enqueue_by_name("inspect.a").id
    assert _inspect.rows(conn, "list_workers") == []
    assert _inspect.rows(conn, "run_errors", {"id": run_id}) == []
    assert _inspect.rows(conn, "run_steps", {"id": run_id}) == []


def test_busiest_groups_by_queued_runs(app: pgqueue.App, conn: Conn) -> None:
    for group in ("g1", "g2", "g1"):
        app.enqueue_by_name("inspect.a", queue="mail", group=group)
    app.enqueue_by_name("inspect.a", queue="other", group="g3")
    found = _inspect.rows(conn, "busiest_groups", {"queue": "mail", "limit": 10})
    assert [(g["group_key"], g["running"], g["queued"]) for g in found] == [
        ("g1", 0, 2),
        ("g2", 0, 1),
    ]
    top = _inspect.rows(conn, "busiest_groups", {"queue": None, "limit": 1})
    assert [g["group_key"] for g in top] == ["g1"]
