"""`async def` workflows used by tests/workflows/test_async_workflows.py worker processes."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()
FAST = pgqueue.RetryPolicy(base=0.05, jitter=0)


def effect(tag: str, run_id: int, value: Any) -> Any:
    record(tag, run_id)
    return value


async def effect_async(tag: str, run_id: int, value: Any) -> Any:
    await asyncio.to_thread(record, tag, run_id)
    return value


@app.task(name="async.child")
def child(n: int) -> int:
    return n * 10


@app.task(name="async.slow_child")
def slow_child() -> None:
    import time

    time.sleep(60)


@app.workflow(name="async.three_steps", max_attempts=3)
async def three_steps(ctx: pgqueue.AsyncContext, n: int) -> int:
    """Step one async, step two async and killed in its first attempt, step three sync."""
    one = await ctx.step("one", effect_async, "one", ctx.run_id, 1)

    async def two() -> int:
        await asyncio.to_thread(record, "start:two", ctx.run_id)
        if ctx.attempt == 1:
            await asyncio.sleep(60)  # the worker is killed here
        return 2

    second = await ctx.step("two", two)
    three = await ctx.step("three", effect, "three", ctx.run_id, 3)
    return n + one + second + three


@app.workflow(name="async.sleeper")
async def sleeper(ctx: pgqueue.AsyncContext, seconds: float) -> str:
    await ctx.step("before", effect, "before", ctx.run_id, 1)
    await ctx.sleep("cooldown", seconds)
    await ctx.step("after", effect_async, "after", ctx.run_id, 1)
    return "rested"


@app.workflow(name="async.waiter")
async def waiter(ctx: pgqueue.AsyncContext, key: str, timeout: float | None) -> Any:
    got = await ctx.wait_for_event("paid", event="order.paid", key=key, timeout=timeout)
    await ctx.step("seen", effect, "seen", ctx.run_id, 1)
    return got


@app.workflow(name="async.parent")
async def parent(ctx: pgqueue.AsyncContext, n: int) -> list[int]:
    called = await ctx.call("double", child, n)
    mapped = await ctx.map("many", child, [1, 2, 3])
    await ctx.spawn("fire", child, 0)
    return [called, *mapped]


@app.workflow(name="async.together")
async def together(ctx: pgqueue.AsyncContext, n: int) -> list[int]:
    """Two child runs waited for together: each wait ends the attempt until its child is
    done, and the replay finds the other's child, not a new one."""
    async with asyncio.TaskGroup() as group:
        a = group.create_task(ctx.call("a", child, n))
        b = group.create_task(ctx.call("b", child, n + 1))
    return [a.result(), b.result()]


@app.workflow(name="async.gathered")
async def gathered(ctx: pgqueue.AsyncContext) -> list[int]:
    """Steps awaited together are named in the order they are written."""
    return list(
        await asyncio.gather(
            *(ctx.step("item", effect_async, "item", ctx.run_id, i) for i in range(5))
        )
    )


async def hang(ctx: pgqueue.AsyncContext) -> None:
    await ctx.step("first", effect, "first", ctx.run_id, 1)
    try:
        await ctx.step("forever", asyncio.sleep, 60)
    except asyncio.CancelledError:
        await asyncio.to_thread(record, "cancelled", ctx.run_id)
        raise


stuck = app.workflow(name="async.stuck", timeout=1, max_attempts=1)(hang)
hangs = app.workflow(name="async.hangs")(hang)


@app.workflow(name="async.blocks")
async def blocks(ctx: pgqueue.AsyncContext) -> None:
    """A sync operation on the loop is refused, not left to block it."""
    try:
        pgqueue.current().step("sync", effect, "sync", ctx.run_id, 1)
    except RuntimeError as exc:
        await ctx.step("refused", effect, str(exc), ctx.run_id, 1)


@app.workflow(name="async.slow_once", timeout=1, max_attempts=2, retry=FAST)
async def slow_once(ctx: pgqueue.AsyncContext) -> str:
    """Its first attempt times out in its second step; the retry replays the first."""
    await ctx.step("one", effect, "one", ctx.run_id, 1)
    if ctx.attempt == 1:
        await asyncio.sleep(30)
    await ctx.step("two", effect_async, "two", ctx.run_id, 2)
    return "second time"


# "v1", or "args" after a deploy that calls step 'a' with another argument
# (tests/workflows/test_async_workflows.py)
CODE = os.environ.get("ASYNCFLOWS_CODE", "v1")


@app.workflow(name="async.deployed")
async def deployed(ctx: pgqueue.AsyncContext, n: int) -> int:
    a = await ctx.step("a", effect_async, "a", ctx.run_id, n + 1 if CODE == "args" else n)
    await ctx.wait_for_event("go", event="async.go", key=str(ctx.run_id))
    return int(a)
