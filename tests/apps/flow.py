"""Tasks for tests/worker/test_flow_control.py: rate-limited and ordered queues."""

from __future__ import annotations

import time

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()
app.queue("rated", rate_limit="20/s")
app.queue("group_rated", group_rate_limit="4/s")
app.queue("rated_capped", concurrency=2, rate_limit="10/s")
app.queue("ordered", group_concurrency=1, ordered=True)

QUICK_RETRY = pgqueue.RetryPolicy(base=0.3, factor=1.0, jitter=0.0)


@app.task(name="flow.tick", queue="rated")
def tick(n: int) -> int:
    return n


@app.task(name="flow.slow_tick", queue="rated_capped")
def slow_tick(n: int) -> int:
    time.sleep(0.3)
    return n


@app.workflow(name="flow.step", queue="ordered", max_attempts=5, retry=QUICK_RETRY)
def step(ctx: pgqueue.Context, group: str, seq: int, seconds: float, fail_first: bool) -> None:
    """One step of a group's sequence: records its start and end (with the attempt); with
    fail_first, its first attempt fails (and is retried)."""
    tag = f"{group}:{seq}:{ctx.attempt}"
    record(f"start:{tag}", ctx.run_id)
    time.sleep(seconds)
    if fail_first and ctx.attempt == 1:
        record(f"fail:{tag}", ctx.run_id)
        raise RuntimeError("first attempt fails")
    record(f"end:{tag}", ctx.run_id)
