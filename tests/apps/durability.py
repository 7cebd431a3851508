"""Tasks for tests/worker/test_durability.py, run by real worker processes.

Every execution of a task body is recorded in table `executions` (EXECUTIONS_DDL): one row
per execution, inserted when the body starts and updated when it ends, with wall-clock
times taken in the task (all processes share the host clock). Writes are retried on a new
connection while the database is unreachable (killed connections, server restart) and are
idempotent (keyed by a per-execution uuid), so an outage never loses or doubles a record.

`mark` instead writes one row to `marks` (MARKS_DDL, no unique constraint) and never
retries its write: a run executed twice shows up as two rows. Only its connect is tried
again (a connect that fails has written nothing): with three workers of 20 threads each,
a connect can take longer than its timeout on a loaded machine, or meet a full server,
and that would fail the attempt for a reason the test is not about.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any

import psycopg

import pgqueue

app = pgqueue.App()

EXECUTIONS_DDL = """
CREATE TABLE IF NOT EXISTS executions (
    exec_id uuid PRIMARY KEY,
    tag     text NOT NULL,
    run_id  bigint,
    attempt integer,
    pid     integer NOT NULL,
    started double precision NOT NULL,
    ended   double precision
)"""

MARKS_DDL = "CREATE TABLE IF NOT EXISTS marks (tag text NOT NULL, pid integer NOT NULL)"

_local = threading.local()


def _connection() -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(app.dsn, autocommit=True, connect_timeout=2)
        _local.conn = conn
    return conn


def _connected(deadline: float = 60.0) -> psycopg.Connection[Any]:
    """This thread's connection, connecting again until the database takes it."""
    give_up = time.monotonic() + deadline
    while True:
        try:
            return _connection()
        except psycopg.OperationalError:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.05)


def _write(query: str, params: Any, deadline: float = 60.0) -> None:
    """Execute an idempotent write, reconnecting until the database is back."""
    give_up = time.monotonic() + deadline
    while True:
        try:
            _connection().execute(query, params)
            return
        except psycopg.OperationalError:
            conn = getattr(_local, "conn", None)
            if conn is not None:
                conn.close()
            if time.monotonic() > give_up:
                raise
            time.sleep(0.05)


class Execution:
    """Records one execution of a task body in `executions`."""

    def __init__(self, tag: str, run_id: int | None = None, attempt: int | None = None):
        self.id = uuid.uuid4()
        _write(
            "INSERT INTO executions (exec_id, tag, run_id, attempt, pid, started) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (exec_id) DO NOTHING",
            (self.id, tag, run_id, attempt, os.getpid(), time.time()),
        )

    def end(self) -> None:
        _write("UPDATE executions SET ended = %s WHERE exec_id = %s", (time.time(), self.id))


@app.task(name="dur.mark")
def mark(tag: str) -> str:
    # No retry here on purpose: a failed write fails the attempt, which the test sees.
    _connected().execute("INSERT INTO marks (tag, pid) VALUES (%s, %s)", (tag, os.getpid()))
    return tag


@app.task(name="dur.work", max_attempts=5)
def work(tag: str, seconds: float) -> str:
    """Busy for `seconds` (sleeping), recorded as one execution."""
    execution = Execution(tag)
    time.sleep(seconds)
    execution.end()
    return tag


@app.task(name="dur.quiet", max_attempts=5)
def quiet(tag: str, seconds: float) -> str:
    """Like `work`, but records only its start: its outcome is the worker's only write
    after it, so an outage at the end tests the completer alone."""
    Execution(tag)
    time.sleep(seconds)
    return tag


@app.workflow(name="dur.hold", max_attempts=3)
def hold(ctx: pgqueue.Context, tag: str, first: float, later: float) -> dict[str, Any]:
    """Sleeps `first` seconds on attempt 1 and `later` seconds on later attempts."""
    execution = Execution(tag, ctx.run_id, ctx.attempt)
    time.sleep(first if ctx.attempt == 1 else later)
    execution.end()
    return {"attempt": ctx.attempt, "pid": os.getpid()}


@app.task(name="dur.touch")
def touch(tag: str) -> str:
    """Instant: used to measure wake-up latency."""
    return tag
