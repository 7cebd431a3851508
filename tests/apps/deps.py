"""Tasks for tests/worker/test_dependencies.py, run by real worker processes.

Every execution of a task body is a row of `dep_log` (DDL): the run, its attempt, the
worker's pid, and the wall-clock times its body started and ended (all processes share
the host clock), written on a connection of the body's own, so that a test can check that
no body began before the bodies of its dependencies ended."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg

import pgqueue

app = pgqueue.App()

DDL = """
CREATE TABLE IF NOT EXISTS dep_log (
    run_id  bigint NOT NULL,
    attempt integer NOT NULL,
    pid     integer NOT NULL,
    started double precision NOT NULL,
    ended   double precision
)"""

_local = threading.local()


def _connection() -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(app.dsn, autocommit=True, connect_timeout=10)
        _local.conn = conn
    return conn


@app.task(name="deps.step", max_attempts=5)
def step(seconds: float = 0.0, fail: bool = False) -> int:
    """Logs its start, sleeps `seconds`, logs its end; raises NonRetryable if `fail`."""
    ctx = pgqueue.current()
    conn = _connection()
    conn.execute(
        "INSERT INTO dep_log (run_id, attempt, pid, started) VALUES (%s, %s, %s, %s)",
        (ctx.run_id, ctx.attempt, os.getpid(), time.time()),
    )
    time.sleep(seconds)
    if fail:
        raise pgqueue.NonRetryable("asked to fail")
    conn.execute(
        "UPDATE dep_log SET ended = %s WHERE run_id = %s AND attempt = %s",
        (time.time(), ctx.run_id, ctx.attempt),
    )
    return ctx.run_id
