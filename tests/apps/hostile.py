"""Tasks for tests/worker/test_hostile.py: task code that misbehaves, run by real worker processes.

Every task body that starts writes a row to `executions` (EXECUTIONS_DDL) and sets its
`ended` when it ends, so that a test can count how many times a run's body ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from typing import Any

import psycopg

import pgqueue

app = pgqueue.App()

EXECUTIONS_DDL = """
CREATE TABLE IF NOT EXISTS executions (
    id      bigserial PRIMARY KEY,
    tag     text NOT NULL,
    pid     integer NOT NULL,
    ended   boolean NOT NULL DEFAULT false,
    stopped boolean NOT NULL DEFAULT false
)"""


def _record(tag: str) -> int:
    with psycopg.connect(app.dsn, autocommit=True) as c:
        row = c.execute(
            "INSERT INTO executions (tag, pid) VALUES (%s, %s) RETURNING id", (tag, os.getpid())
        ).fetchone()
        assert row is not None
        return int(row[0])


def _end(execution: int, stopped: bool) -> None:
    with psycopg.connect(app.dsn, autocommit=True) as c:
        c.execute(
            "UPDATE executions SET ended = true, stopped = %s WHERE id = %s", (stopped, execution)
        )


@app.task(name="hostile.good")
def good(tag: str) -> str:
    _end(_record(tag), False)
    return tag


@app.workflow(name="hostile.hold", max_attempts=3)
def hold(ctx: pgqueue.Context, tag: str, seconds: float) -> str:
    """Runs `seconds`, or until told to stop (ctx.cancelled)."""
    execution = _record(tag)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(0.02)
    _end(execution, ctx.cancelled)
    return tag


class Custom(BaseException):
    """Neither an Exception nor one of Python's own BaseExceptions."""


def _throw(what: str) -> None:
    if what == "exit":
        sys.exit(2)
    if what == "interrupt":
        raise KeyboardInterrupt
    raise Custom("a custom BaseException")


@app.task(name="hostile.async_raises", max_attempts=1)
async def async_raises(tag: str, what: str) -> None:
    _record(tag)
    _throw(what)


def _hook_raises(ctx: pgqueue.Context, value: Any) -> None:
    _throw(ctx.args[1])


@app.task(name="hostile.sync_raises", max_attempts=1, on_failure=_hook_raises)
def sync_raises(tag: str, what: str) -> None:
    """A sync task with a hook (its attempt is awaited from the event loop)."""
    _record(tag)
    _throw(what)


@app.task(name="hostile.hook_raises", on_success=_hook_raises)
def hook_raises(tag: str, what: str) -> str:
    _record(tag)
    return tag


async def _deaf(seconds: float | None) -> None:
    """Sleep `seconds` (forever if None), swallowing every cancellation."""
    deadline = None if seconds is None else time.monotonic() + seconds
    while deadline is None or time.monotonic() < deadline:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)


@app.task(name="hostile.stubborn", timeout=1, max_attempts=1)
async def stubborn(tag: str, seconds: float) -> str:
    """Swallows the cancellation of its timeout and returns `seconds` later."""
    _record(tag)
    await _deaf(seconds)
    return tag


@app.task(name="hostile.immortal")
async def immortal(tag: str) -> None:
    """Swallows every cancellation and never returns."""
    _record(tag)
    await _deaf(None)
