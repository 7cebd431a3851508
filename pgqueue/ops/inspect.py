"""Read-only queries behind App's inspection calls (list_runs, stats of queues, groups and
workers): each takes a connection and runs one file of sql/, through pgqueue.runs.read's
cursor (which reads an out-of-range timestamp as datetime.min or datetime.max)."""

from __future__ import annotations

from typing import Any

import psycopg

from pgqueue.db import sql as _sql
from pgqueue.runs.read import cursor
from pgqueue.runs.run import Run
from pgqueue.runs.terminal import printable, seconds_text

Conn = psycopg.Connection[Any]


def list_runs(
    conn: Conn, *, state: str | None, queue: str | None, task: str | None, limit: int
) -> list[Run]:
    params = {"state": state, "queue": queue, "task": task, "limit": limit}
    with cursor(conn) as cur:
        return [Run.from_row(r) for r in cur.execute(_sql.query("list_runs"), params)]


def rows(conn: Conn, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every row of query `name` as a dict (run_errors, run_steps, busiest_groups,
    queue_summary, list_workers)."""
    with cursor(conn) as cur:
        return cur.execute(_sql.query(name), params).fetchall()


def wait_text(step: dict[str, Any]) -> str | None:
    """What a step of run_steps waited for, for people: "event order.paid key 42: received
    after 3.2 s", "child run 913: waiting for 12 min", "sleep 30 s: done"; None if it never
    waited. A finished event wait with a timeout that lasted that long gave up."""
    waited = step.get("waited")
    if not waited:
        return None
    spent = seconds_text(step.get("waited_seconds"))
    if "event" in waited:
        what = f"event {printable(str(waited['event']))}"
        if waited.get("key"):
            what += f" key {printable(str(waited['key']))}"
        timeout = waited.get("timeout")
        if step["state"] == "waiting":
            limit = "" if timeout is None else f" (timeout {seconds_text(timeout)})"
            return f"{what}: waiting for {spent}{limit}"
        gave_up = timeout is not None and (step.get("waited_seconds") or 0) >= timeout
        return f"{what}: {'timed out' if gave_up else 'received'} after {spent}"
    if "run_id" in waited:
        what = f"child run {waited['run_id']}"
    elif "until" in waited:
        what = f"sleep until {waited['until']}"
    else:
        what = f"sleep {seconds_text(waited.get('seconds'))}"
    if step["state"] == "waiting":
        return f"{what}: waiting for {spent}"
    return f"{what}: {step['state']} after {spent}"
