"""Tasks for tests/worker/test_notification_flood.py: runs that record each execution.

Every execution writes a row to `flood_executions` (EXECUTIONS_DDL) when it starts, with
the server's clock, and sets `ended_at` when it ends: a test counts how many times a
run's body ran and when it started.
"""

from __future__ import annotations

import asyncio
import os
import time

import psycopg

import pgqueue

app = pgqueue.App()

EXECUTIONS_DDL = """
CREATE TABLE IF NOT EXISTS flood_executions (
    id         bigserial PRIMARY KEY,
    run_id     bigint NOT NULL,
    pid        integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at   timestamptz
)"""


def _record() -> int:
    with psycopg.connect(app.dsn, autocommit=True) as c:
        row = c.execute(
            "INSERT INTO flood_executions (run_id, pid) VALUES (%s, %s) RETURNING id",
            (pgqueue.current().run_id, os.getpid()),
        ).fetchone()
        assert row is not None
        return int(row[0])


def _end(execution: int) -> None:
    with psycopg.connect(app.dsn, autocommit=True) as c:
        c.execute(
            "UPDATE flood_executions SET ended_at = clock_timestamp() WHERE id = %s",
            (execution,),
        )


@app.task(name="flood.probe", max_attempts=3)
def probe() -> None:
    _end(_record())


@app.task(name="flood.hold", max_attempts=3)
def hold(seconds: float) -> None:
    """Holds its run (and its thread) for `seconds`: a run leased through the flood."""
    execution = _record()
    time.sleep(seconds)
    _end(execution)


@app.task(name="flood.hold_async", max_attempts=3)
async def hold_async(seconds: float) -> None:
    """As hold, on the worker's event loop."""
    execution = await asyncio.to_thread(_record)
    await asyncio.sleep(seconds)
    await asyncio.to_thread(_end, execution)
