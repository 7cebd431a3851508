"""Tasks for tests/worker/test_processes.py: sync tasks that run in child processes
(`pgqueue worker --processes N`). Each reports the pid of the process running it."""

from __future__ import annotations

import logging
import os
import time

import pgqueue

app = pgqueue.App()
app.queue("limited", concurrency=1)


@app.task(name="procs.pid")
def pid() -> int:
    return os.getpid()


@app.task(name="procs.parent_pid")
async def parent_pid() -> int:
    """An async task: it runs on the worker's own event loop, never in a child."""
    return os.getpid()


def _spin(seconds: float) -> None:
    """CPU-bound work that never looks at ctx.cancelled (only a kill stops it)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


@app.task(name="procs.spin", max_attempts=3)
def spin(seconds: float) -> int:
    """Its child's pid as its progress message (written by the child, fenced by the
    lease), then `seconds` of CPU on the first attempt only."""
    ctx = pgqueue.current()
    ctx.progress(0, message=str(os.getpid()))
    if ctx.attempt == 1:
        _spin(seconds)
    return os.getpid()


@app.task(name="procs.hog", timeout=1, max_attempts=1)
def hog() -> None:
    pgqueue.current().progress(0, message=str(os.getpid()))
    _spin(3600)


_kept: list[bytes] = []


@app.task(name="procs.leak")
def leak(mb: int) -> int:
    """Keeps `mb` MiB for good (written, so that it is resident), as a leaking task does."""
    _kept.append(b"\x01" * (mb << 20))
    return os.getpid()


@app.task(name="procs.fails")
def fails() -> None:
    raise pgqueue.NonRetryable("no good")


@app.task(name="procs.limited_hog", queue="limited", timeout=1, max_attempts=1)
def limited_hog() -> None:
    pgqueue.current().progress(0, message=str(os.getpid()))
    _spin(3600)


@app.task(name="procs.limited_pid", queue="limited")
def limited_pid() -> int:
    return os.getpid()


@app.task(name="procs.noted")
def noted(where: int) -> None:
    """Enqueued by hooked's hook, with the pid of the process that ran the hook."""


def _note(ctx: pgqueue.Context, result: object) -> None:
    noted.enqueue(os.getpid())


@app.task(name="procs.hooked", on_success=_note)
def hooked() -> int:
    return os.getpid()


@app.task(name="procs.logs")
def logs() -> None:
    logging.getLogger("procs").warning("a line from a child")


@app.task(name="procs.exits", max_attempts=1)
def exits(code: int) -> None:
    """Ends its process as hostile code may (no exception, no cleanup)."""
    os._exit(code)


@app.task(name="procs.polite")
def polite() -> int:
    """Sleeps until told to stop (ctx.cancelled, sent to the child), then returns."""
    ctx = pgqueue.current()
    ctx.progress(0, message=str(os.getpid()))
    ctx.wait_cancelled(3600)
    return os.getpid()
