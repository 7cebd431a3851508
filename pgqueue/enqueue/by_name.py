"""Enqueues that App makes for callers without a Task: a run of a task by its name (a task
this process may not import), and an event. Inserting the runs is App.insert_runs, with the
rules of pgqueue.enqueue.inserts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue.db import payload as _json
from pgqueue.db import sql as _sql
from pgqueue.enqueue.checks import check_key, check_name, check_seconds
from pgqueue.enqueue.options import EnqueueOptions, build_row

if TYPE_CHECKING:
    from pgqueue.app import App
    from pgqueue.runs.handle import RunHandle


def by_name(
    app: App,
    task: str,
    args: Sequence[Any],
    kwargs: dict[str, Any] | None,
    options: dict[str, Any],
) -> RunHandle:
    """A registered task's own options and checks; otherwise the arguments as given, for
    the worker to check."""
    if task in app.tasks:
        return app.tasks[task].options(**options).enqueue(*args, **(kwargs or {}))
    opts = EnqueueOptions(**options)
    row = build_row(
        app, check_name("task", task), args, kwargs or {}, opts, queue=app.default_queue
    )
    return app.insert_runs([row], conn=opts.sync_conn)[0]


def event_params(
    app: App, event: str, key: str | None, payload: Any, delay: float | None
) -> dict[str, Any]:
    """The parameters of emit_event.sql, checked (names, sizes, delay) before any
    connection is taken."""
    check_name("event", event)
    text = _json.dumps(
        payload,
        what=f"the payload of event {event!r}",
        limit=app.max_payload_bytes,
        max_depth=app.max_json_depth,
    )
    return {
        "event": event,
        "key": check_key("event key", key),
        "payload": text,
        "delay": None if delay is None else check_seconds("delay", delay, zero=True),
    }


def emit_event(conn: psycopg.Connection[Any], params: dict[str, Any]) -> int:
    """Insert the event (waking its waiters, now or after its delay); its id."""
    row = conn.execute(_sql.query("emit_event"), params).fetchone()
    assert row is not None
    return int(row[0])
