"""Events: the checked parameters of an event, and its insert (Enqueuer.emit_event,
ctx.emit_event)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue.db import payload as _json
from pgqueue.db import sql as _sql
from pgqueue.enqueue.checks import check_key, check_name, check_seconds

if TYPE_CHECKING:
    from pgqueue.db.database import Database


def event_params(
    database: Database, event: str, key: str | None, payload: Any, delay: float | None
) -> dict[str, Any]:
    """The parameters of emit_event.sql, checked (names, sizes, delay) before any
    connection is taken."""
    check_name("event", event)
    text = _json.dumps(
        payload,
        what=f"the payload of event {event!r}",
        limit=database.max_payload_bytes,
        max_depth=database.max_json_depth,
    )
    return {
        "event": event,
        "key": check_key("event key", key),
        "payload": text,
        "delay": None if delay is None else check_seconds("delay", delay, zero=True),
    }


def emit_event(conn: psycopg.Connection[Any], params: dict[str, Any]) -> int:
    """Insert the event (waking its waiters, now or once its delay has passed); its id."""
    row = conn.execute(_sql.query("emit_event"), params).fetchone()
    assert row is not None
    return int(row[0])
