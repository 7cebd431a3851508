"""Read-only queries behind App's inspection calls (get_run, list_runs, stats of queues,
groups and workers): each takes a connection and runs one file of sql/."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgqueue import _sql
from pgqueue.runs import Run, check_run_id, found_run

Conn = psycopg.Connection[Any]


def get_run(conn: Conn, run_id: int) -> Run:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_sql.query("get_run"), {"id": check_run_id(run_id)}).fetchone()
    return found_run(run_id, row)


def list_runs(
    conn: Conn, *, state: str | None, queue: str | None, task: str | None, limit: int
) -> list[Run]:
    params = {"state": state, "queue": queue, "task": task, "limit": limit}
    with conn.cursor(row_factory=dict_row) as cur:
        return [Run.from_row(r) for r in cur.execute(_sql.query("list_runs"), params)]


def rows(conn: Conn, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every row of query `name` as a dict (run_errors, run_steps, busiest_groups,
    queue_summary, list_workers)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_sql.query(name), params).fetchall()
