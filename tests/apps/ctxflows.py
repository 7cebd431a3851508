"""Workflows for tests/workflows/test_context_flows.py: step and call timeouts, emit_event
as a step, a step visible while it runs, and durable sleeps and event waits woken on time."""

from __future__ import annotations

import time

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()
FAST = pgqueue.RetryPolicy(base=0.05, jitter=0)


@app.task(name="ctxflows.stuck", queue="nowhere")
def stuck() -> str:
    return "never runs: no test worker serves queue 'nowhere'"


@app.task(name="ctxflows.quick")
def quick(n: int) -> int:
    return n + 1


def fail_first(ctx: pgqueue.Context, what: str) -> str:
    if ctx.attempt == 1:
        raise RuntimeError(f"{what}: the first attempt fails")
    return what


@app.workflow(name="ctxflows.step_timeout", retry=FAST)
def step_timeout(ctx: pgqueue.Context) -> str:
    try:
        ctx.step("slow", time.sleep, 30, timeout=0.3)
    except TimeoutError as exc:
        record(f"step timeout: {exc}", ctx.run_id)
    return ctx.step("fast", lambda: "fast", timeout=10)


@app.workflow(name="ctxflows.call_timeout", retry=FAST, max_attempts=3)
def call_timeout(ctx: pgqueue.Context, seconds: float) -> str:
    got = ctx.call("in time", quick, 1, timeout=30)
    try:
        ctx.call("late", stuck, timeout=seconds)
        outcome = "returned"
    except TimeoutError as exc:
        outcome = f"TimeoutError: {exc}"
    record(outcome, ctx.run_id)
    # a failed attempt after the timeout: its replay must see the same TimeoutError
    ctx.step("after", fail_first, ctx, "after")
    return f"{got} {outcome}"


@app.workflow(name="ctxflows.emits", retry=FAST)
def emits(ctx: pgqueue.Context, key: str) -> int:
    event_id = ctx.emit_event("tell", "ctx.told", key=key, payload={"from": ctx.run_id})
    ctx.step("after", fail_first, ctx, "after")
    return event_id


@app.workflow(name="ctxflows.shows_step")
def shows_step(ctx: pgqueue.Context) -> str:
    ctx.step("quick one", lambda: 1)
    # runs until the run is canceled (or 60 s)
    ctx.step("long one", lambda: ctx.wait_cancelled(60))
    return "done"


@app.workflow(name="ctxflows.sleeper")
def sleeper(ctx: pgqueue.Context, seconds: float) -> str:
    ctx.sleep("nap", seconds)
    return "slept"


@app.workflow(name="ctxflows.waiter")
def waiter(ctx: pgqueue.Context, key: str) -> object:
    return ctx.wait_for_event("wait", event="ctx.tick", key=key, timeout=120)


@app.workflow(name="ctxflows.emits_later", retry=FAST)
def emits_later(ctx: pgqueue.Context, key: str, delay: float) -> int:
    """A delayed event, emitted once whatever the replays (its next step fails once)."""
    event_id = ctx.emit_event("tell", "ctx.tick", key=key, payload="later", delay=delay)
    ctx.step("after", fail_first, ctx, "after")
    return event_id
