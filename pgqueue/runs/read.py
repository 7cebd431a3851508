"""Reading one run: get_run.sql by id, with the checks and the timestamp loader that
every read of runs shares (pgqueue.ops.inspect's listings use them too).

Cursors read timestamps with EdgeTimestamptzLoader: a stored time that Python's datetime
cannot hold (infinity, a BC date, year 10000, which migration 0022's constraints keep out
of new rows) reads as datetime.min or datetime.max instead of failing the whole listing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.datetime import TimestamptzLoader

from pgqueue.db import sql as _sql
from pgqueue.errors import RunNotFound
from pgqueue.runs.run import Run

Conn = psycopg.Connection[Any]


class EdgeTimestamptzLoader(TimestamptzLoader):
    """A timestamptz, or datetime.min / datetime.max (UTC) for one out of their range."""

    def load(self, data: Any) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:
            text = bytes(data)
            early = text.startswith(b"-") or text.endswith(b" BC")
            return (datetime.min if early else datetime.max).replace(tzinfo=UTC)


def cursor(conn: Conn) -> psycopg.Cursor[dict[str, Any]]:
    cur = conn.cursor(row_factory=dict_row)
    cur.adapters.register_loader("timestamptz", EdgeTimestamptzLoader)
    return cur


def check_run_id(run_id: int) -> int:
    """`run_id`, or RunNotFound if no run can have it (ids are bigints): the query would
    otherwise look for a function of numeric and fail as if the schema were missing."""
    if not -(2**63) <= run_id < 2**63:
        raise RunNotFound(f"no run with id {run_id} (run ids are 64-bit integers)")
    return run_id


def found_run(run_id: int, row: dict[str, Any] | None) -> Run:
    """The Run from get_run.sql's row, or RunNotFound."""
    if row is None:
        raise RunNotFound(f"no run with id {run_id} (it may have been pruned)")
    return Run.from_row(row)


def get_run(conn: Conn, run_id: int) -> Run:
    with cursor(conn) as cur:
        row = cur.execute(_sql.query("get_run"), {"id": check_run_id(run_id)}).fetchone()
    return found_run(run_id, row)


async def get_run_async(conn: psycopg.AsyncConnection[Any], run_id: int) -> Run:
    """get_run's async twin (its cursor reads timestamps as psycopg does)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_sql.query("get_run"), {"id": check_run_id(run_id)})
        row = await cur.fetchone()
    return found_run(run_id, row)
