"""Workflows used by tests/workflows/test_durable.py worker processes."""

from __future__ import annotations

import os
import time
from typing import Any

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()
FAST = pgqueue.RetryPolicy(base=0.05, jitter=0)


def effect(tag: str, run_id: int, value: Any) -> Any:
    record(tag, run_id)
    return value


@app.task(name="flows.noop")
def noop() -> str:
    return "noop"


@app.task(name="flows.child")
def child(n: int) -> int:
    record("child")
    return n * 10


@app.task(name="flows.bad_child", max_attempts=1)
def bad_child() -> None:
    raise ValueError("child broke")


@app.workflow(name="flows.four_steps", retry=FAST)
def four_steps(ctx: pgqueue.Context, order: int) -> int:
    a = ctx.step("one", effect, "one", ctx.run_id, 1)
    b = ctx.step("two", effect, "two", ctx.run_id, 2)

    def three() -> int:
        record("three", ctx.run_id)
        if ctx.attempt == 1:
            raise RuntimeError("payment API down")
        return 3

    c = ctx.step("three", three)
    d = ctx.step("four", effect, "four", ctx.run_id, 4)
    return order + a + b + c + d


@app.workflow(name="flows.slow_step_two", max_attempts=3)
def slow_step_two(ctx: pgqueue.Context) -> str:
    ctx.step("one", effect, "one", ctx.run_id, 1)

    def two() -> int:
        record("start:two", ctx.run_id)
        if ctx.attempt == 1:
            time.sleep(60)  # killed here
        return 2

    ctx.step("two", two)
    return "done"


@app.workflow(name="flows.sleeper")
def sleeper(ctx: pgqueue.Context, seconds: float) -> str:
    ctx.step("before", effect, "before", ctx.run_id, 1)
    ctx.sleep("cooldown", seconds)
    ctx.step("after", effect, "after", ctx.run_id, 1)
    return "rested"


@app.workflow(name="flows.waiter")
def waiter(ctx: pgqueue.Context, key: str, timeout: float | None) -> Any:
    return ctx.wait_for_event("paid", event="order.paid", key=key, timeout=timeout)


@app.workflow(name="flows.parent", retry=FAST)
def parent(ctx: pgqueue.Context, n: int) -> int:
    result: int = ctx.call("double", child, n)
    ctx.spawn("fire", noop)
    if ctx.attempt == 1:
        raise RuntimeError("fail after the children exist")
    return result + 1


@app.workflow(name="flows.parent_of_bad")
def parent_of_bad(ctx: pgqueue.Context) -> str:
    try:
        ctx.call("bad", bad_child)
    except pgqueue.ChildFailed as exc:
        return f"caught: {exc.error}"
    return "unreachable"


@app.workflow(name="flows.non_json_step")
def non_json_step(ctx: pgqueue.Context) -> None:
    ctx.step("makes_object", object)


@app.workflow(name="flows.loop")
def loop(ctx: pgqueue.Context, n: int) -> list[int]:
    return [ctx.step("item", effect, "item", ctx.run_id, i) for i in range(n)]


@app.workflow(name="flows.waits_on_child")
def waits_on_child(ctx: pgqueue.Context) -> Any:
    return ctx.call("long", waiter, "never", None)


@app.workflow(name="flows.calls_missing")
def calls_missing(ctx: pgqueue.Context) -> Any:
    """Its child is deleted while it waits (tests/workflows/test_durable.py); the call's
    deadline wakes it."""
    return ctx.call("long", waiter, "never", None, timeout=1.5)


@app.workflow(name="flows.maps_missing")
def maps_missing(ctx: pgqueue.Context) -> Any:
    return ctx.map("many", waiter, [("never-1", None), ("never-2", None)])


# The code a worker runs for flows.deployed: "v1", or after a deploy that changed what the
# replay calls (tests/workflows/test_determinism.py): "args" (step 'a' with another
# argument), "inserted" (a step before 'a'), "renamed" (another function under 'a').
CODE = os.environ.get("FLOWS_CODE", "v1")


def other_effect(tag: str, run_id: int, value: Any) -> Any:
    record(f"other:{tag}", run_id)
    return value


@app.workflow(name="flows.deployed")
def deployed(ctx: pgqueue.Context, n: int) -> int:
    if CODE == "inserted":
        ctx.step("new", effect, "new", ctx.run_id, 0)
    fn = other_effect if CODE == "renamed" else effect
    a = ctx.step("a", fn, "a", ctx.run_id, n + 1 if CODE == "args" else n)
    ctx.wait_for_event("go", event="flows.go", key=str(ctx.run_id))
    b = ctx.step("b", effect, "b", ctx.run_id, 1)
    return int(a) + int(b)
