"""Tasks that look at their own run (pgqueue.current(), progress, hooks, validators), for
tests/workflows/test_context.py's worker processes. Side effects go to table `effects`."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from typing import Any

import pydantic

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()
FAST = pgqueue.RetryPolicy(base=0.05, jitter=0)


def facts() -> dict[str, Any]:
    ctx = pgqueue.current()
    return {
        "run_id": ctx.run_id,
        "task": ctx.task,
        "queue": ctx.queue,
        "group": ctx.group,
        "priority": ctx.priority,
        "attempt": ctx.attempt,
        "max_attempts": ctx.max_attempts,
        "args": ctx.args,
        "kwargs": ctx.kwargs,
        "cancelled": ctx.cancelled,
    }


@app.task(name="ctx.sync_facts", max_attempts=4)
def sync_facts(n: int, *, tag: str = "") -> dict[str, Any]:
    # from a thread the task starts with a copy of its context, as asyncio.to_thread does
    seen: list[int] = []
    copied = contextvars.copy_context()
    t = threading.Thread(target=lambda: seen.append(copied.run(pgqueue.current).run_id))
    t.start()
    t.join()
    return facts() | {"thread_run_id": seen[0]}


@app.task(name="ctx.async_facts")
async def async_facts() -> dict[str, Any]:
    await asyncio.sleep(0)
    in_thread = await asyncio.to_thread(lambda: pgqueue.current().run_id)
    return facts() | {"thread_run_id": in_thread}


@app.workflow(name="ctx.flow_facts")
def flow_facts(ctx: pgqueue.Context) -> dict[str, Any]:
    same = ctx.step("look", lambda: pgqueue.current() is ctx)
    return facts() | {"same": same}


@app.task(name="ctx.outside")
def outside() -> str:
    """current() in a thread that did not copy the task's context: RuntimeError."""
    box: list[str] = []

    def look() -> None:
        try:
            pgqueue.current()
        except RuntimeError as exc:
            box.append(str(exc))

    t = threading.Thread(target=look)
    t.start()
    t.join()
    return box[0]


@app.task(name="ctx.progress_then_wait")
def progress_then_wait(reports: int) -> str:
    """`reports` progress reports as fast as it can, then waits to be canceled."""
    ctx = pgqueue.current()
    for i in range(reports):
        ctx.progress(i + 1, reports, f"item {i + 1}")
    record("reported", ctx.run_id)
    if ctx.wait_cancelled(60):
        record("saw cancel", ctx.run_id)
    return "done"


@app.task(name="ctx.progress_quick")
def progress_quick(reports: int) -> None:
    ctx = pgqueue.current()
    for i in range(reports):
        ctx.progress(i + 1, reports)


@app.task(name="ctx.async_progress")
async def async_progress() -> None:
    ctx = pgqueue.current()
    try:
        ctx.wait_cancelled(1)
    except RuntimeError as exc:
        record(str(exc).split(":")[0], ctx.run_id)
    ctx.progress(1, 2, "half")
    record("reported", ctx.run_id)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        record(f"cancelled flag {ctx.cancelled}", ctx.run_id)
        raise


def note_retry(ctx: pgqueue.Context, error: str) -> None:
    record(f"on_retry {ctx.attempt} {error}", ctx.run_id)
    if ctx.attempt == 2:
        raise RuntimeError("a broken hook")  # logged; the run goes on


def note_failure(ctx: pgqueue.Context, error: str) -> None:
    record(f"on_failure {ctx.attempt}", ctx.run_id)


async def async_note_retry(ctx: pgqueue.Context, error: str) -> None:
    record(f"async on_retry {ctx.attempt} {pgqueue.current() is ctx}", ctx.run_id)


@app.task(name="ctx.flaky", max_attempts=4, retry=FAST, on_retry=note_retry)
def flaky(fail_times: int) -> int:
    ctx = pgqueue.current()
    if ctx.attempt <= fail_times:
        raise ValueError(f"attempt {ctx.attempt} broke")
    return ctx.attempt


@app.task(
    name="ctx.doomed", max_attempts=2, retry=FAST, on_retry=note_retry, on_failure=note_failure
)
def doomed() -> None:
    raise ValueError("always")


@app.task(name="ctx.async_flaky", max_attempts=2, retry=FAST, on_retry=async_note_retry)
async def async_flaky() -> int:
    if pgqueue.current().attempt == 1:
        raise ValueError("first")
    return 2


@app.task(name="ctx.rate_limited", max_attempts=2, on_retry=note_retry)
def rate_limited() -> str:
    """A RetryAfter uses no attempt and fails nothing: no on_retry."""
    ctx = pgqueue.current()
    record("ran", ctx.run_id)
    if _count("ran", ctx.run_id) == 1:
        raise pgqueue.RetryAfter(0.05)
    return "ok"


def _count(tag: str, run_id: int) -> int:
    import psycopg

    with psycopg.connect(app.dsn) as c:
        row = c.execute(
            "SELECT count(*) FROM effects WHERE tag = %s AND run_id = %s", (tag, run_id)
        ).fetchone()
    return int(row[0]) if row else 0


class Order(pydantic.BaseModel):
    n: int
    when: float = 0.0


@app.task(name="ctx.typed", validator=Order)
def typed(n: int, when: float = 0.0) -> list[str]:
    return [type(n).__name__, json.dumps(n), type(when).__name__]


def to_int(n: Any) -> dict[str, int]:
    if not str(n).isdigit():
        raise ValueError(f"n must be digits, not {n!r}")
    return {"n": int(n)}


@app.task(name="ctx.converted", validator=to_int)
def converted(n: int) -> str:
    return type(n).__name__


@app.task(name="ctx.slow")
def slow(seconds: float) -> None:
    pgqueue.current().wait_cancelled(seconds)
