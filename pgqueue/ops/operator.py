"""Operator actions behind App's calls: cancel and retry a run, a queue's limits and pause.
Each takes a connection (autocommit) and runs one file of sql/."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgqueue.db import sql as _sql
from pgqueue.enqueue.checks import MAX_REASON_BYTES, check_key
from pgqueue.errors import UserError
from pgqueue.runs.read import check_run_id
from pgqueue.tasks.rates import Rate, parse_rate, rate_params

Conn = psycopg.Connection[Any]


def cancel(conn: Conn, run_id: int, *, children: bool, reason: str | None = None) -> bool:
    check_key("cancel reason", reason, limit=MAX_REASON_BYTES)
    params = {"id": check_run_id(run_id), "children": children, "reason": reason}
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
    conn: Conn,
    queue: str,
    concurrency: int | None,
    group_concurrency: int | None,
    rate_limit: str | None = None,
    group_rate_limit: str | None = None,
    ordered: bool = False,
) -> None:
    """Store a queue's limits, already checked (App.set_limits checks them first)."""
    params: dict[str, Any] = {
        "queue": queue,
        "concurrency": concurrency,
        "group_concurrency": group_concurrency,
        "ordered": ordered,
        **rate_params("rate", parse_rate("rate_limit", rate_limit)),
        **rate_params("group_rate", parse_rate("group_rate_limit", group_rate_limit)),
    }
    conn.execute(_sql.query("set_queue_limits"), params)


def flow_limits(conn: Conn, queue: str) -> dict[str, Any]:
    """The queue's stored rate limits ("N/m" or None) and ordering (False if unknown)."""
    row = conn.execute(_sql.query("queue_flow"), {"queue": queue}).fetchone()
    if row is None:
        return {"rate_limit": None, "group_rate_limit": None, "ordered": False}
    rate, period, group_rate, group_period, ordered = row
    return {
        "rate_limit": str(Rate(rate, int(period))) if rate else None,
        "group_rate_limit": str(Rate(group_rate, int(group_period))) if group_rate else None,
        "ordered": ordered,
    }


def group_weights(conn: Conn, queue: str) -> dict[str, Any] | None:
    """The queue's stored permit limits, group weights ({} for none) and default group
    weight; None if the queue is not in pgqueue.queues."""
    row = conn.execute(_sql.query("queue_weights"), {"queue": queue}).fetchone()
    if row is None:
        return None
    concurrency, group_concurrency, weights, default = row
    return {
        "concurrency": concurrency,
        "group_concurrency": group_concurrency,
        "group_weights": dict(weights or {}),
        "default_group_weight": default,
    }


def set_group_weights(
    conn: Conn, queue: str, weights: tuple[tuple[str, int], ...] | None, default: int
) -> None:
    """Store a queue's group weights, already checked (App.set_group_weights checks them)."""
    params = {
        "queue": queue,
        "group_weights": None if weights is None else Jsonb(dict(weights)),
        "default_group_weight": default,
    }
    conn.execute(_sql.query("set_group_weights"), params)


def set_paused(conn: Conn, queue: str, paused: bool) -> None:
    conn.execute(_sql.query("set_queue_paused"), {"queue": queue, "paused": paused})
