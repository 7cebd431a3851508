"""Operator actions behind App's calls: cancel and retry a run, a queue's limits and pause.
Each takes a connection (autocommit) and runs one file of sql/."""

from __future__ import annotations

from typing import Any

import psycopg

from pgqueue import _sql
from pgqueue.errors import UserError
from pgqueue.runs import check_run_id

Conn = psycopg.Connection[Any]


def cancel(conn: Conn, run_id: int, *, children: bool) -> bool:
    params = {"id": check_run_id(run_id), "children": children}
    row = conn.execute(_sql.query("cancel"), params).fetchone()
    return bool(row and row[0])


def retry(conn: Conn, run_id: int) -> bool:
    try:
        row = conn.execute(_sql.query("retry"), {"id": check_run_id(run_id)}).fetchone()
    except psycopg.errors.UniqueViolation as exc:
        if exc.diag.constraint_name != "runs_unique_key_idx":
            raise
        raise UserError(
            f"run {run_id} cannot be retried: a newer run holds its unique key in the same "
            "scope; cancel that run first, or wait until it finishes"
        ) from None
    return bool(row and row[0])


def set_limits(
    conn: Conn, queue: str, concurrency: int | None, group_concurrency: int | None
) -> None:
    """Store a queue's limits, already checked (App.set_limits checks them first)."""
    params = {"queue": queue, "concurrency": concurrency, "group_concurrency": group_concurrency}
    conn.execute(_sql.query("set_queue_limits"), params)


def set_paused(conn: Conn, queue: str, paused: bool) -> None:
    conn.execute(_sql.query("set_queue_paused"), {"queue": queue, "paused": paused})
