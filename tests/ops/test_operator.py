"""Operator actions alone (pgqueue.ops.operator), on a connection to a real database: cancel,
retry, a queue's limits and pause, and the config notice workers listen for."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.ops import inspect as _inspect
from pgqueue.ops import operator as _operator
from pgqueue.runs import read as _read

Conn = psycopg.Connection[Any]


def state(conn: Conn, run_id: int) -> str:
    return _read.get_run(conn, run_id).state


def test_cancel_finishes_an_unfinished_run_once(app: pgqueue.App, conn: Conn) -> None:
    run_id = app.enqueue_by_name("ops.send", [1]).id
    assert _operator.cancel(conn, run_id, children=False) is True
    assert state(conn, run_id) == "canceled"
    assert _operator.cancel(conn, run_id, children=False) is False


def test_cancel_with_children_cancels_the_runs_it_started(app: pgqueue.App, conn: Conn) -> None:
    parent = app.enqueue_by_name("ops.parent").id
    child = app.enqueue_by_name("ops.child").id
    other = app.enqueue_by_name("ops.child").id
    conn.execute("UPDATE pgqueue.runs SET parent_id = %s WHERE id = %s", (parent, child))
    assert _operator.cancel(conn, parent, children=True) is True
    assert (state(conn, parent), state(conn, child), state(conn, other)) == (
        "canceled",
        "canceled",
        "queued",
    )


def test_retry_queues_a_finished_run_again_and_records_it(app: pgqueue.App, conn: Conn) -> None:
    run_id = app.enqueue_by_name("ops.send").id
    assert _operator.retry(conn, run_id) is False  # not finished
    _operator.cancel(conn, run_id, children=False, reason="wrong recipient")
    conn.execute("UPDATE pgqueue.runs SET error = 'ValueError: boom' WHERE id = %s", [run_id])
    assert _operator.retry(conn, run_id) is True
    run = _read.get_run(conn, run_id)
    # queued again, it shows neither the last error nor why it was canceled
    assert (run.state, run.error, run.cancel_reason) == ("queued", None, None)
    kinds = [e["kind"] for e in _inspect.rows(conn, "run_errors", {"id": run_id})]
    assert kinds == ["retried"]


@pytest.mark.parametrize("action", ["cancel", "retry"])
def test_ids_beyond_bigint_are_not_found_without_a_query(conn: Conn, action: str) -> None:
    with pytest.raises(pgqueue.RunNotFound, match="64-bit"):
        if action == "cancel":
            _operator.cancel(conn, 2**63, children=False)
        else:
            _operator.retry(conn, 2**63)


def queue_row(conn: Conn, name: str) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT concurrency, group_concurrency, paused FROM pgqueue.queues WHERE name = %s",
        (name,),
    ).fetchone()


def test_limits_and_pause_are_stored_and_announced(dsn: str, conn: Conn) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgqueue_config")
        _operator.set_limits(conn, "mail", 3, 1)
        assert queue_row(conn, "mail") == (3, 1, False)
        _operator.set_paused(conn, "mail", True)
        assert queue_row(conn, "mail") == (3, 1, True)
        _operator.set_limits(conn, "mail", None, None)
        _operator.set_paused(conn, "mail", False)
        assert queue_row(conn, "mail") == (None, None, False)
        heard = [n.payload for n in listener.notifies(timeout=10, stop_after=4)]
    assert heard == ["mail"] * 4
