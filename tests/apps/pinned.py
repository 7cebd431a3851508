"""Tasks for tests/e2e/test_search_path.py: one of each kind of work a worker does, so that a
worker running them calls every pgqueue function and claim statement (plain, rated and
limited claims, workflows, batches, progress)."""

from __future__ import annotations

import pgqueue

app = pgqueue.App()
app.queue("capped", concurrency=2)  # claim_limited
app.queue("group_rated", group_rate_limit="50/s", rate_limit="100/s")  # claim_limited, logs
app.queue("ordered", group_concurrency=1, ordered=True)  # claim_limited, ordered probe
app.queue("rated", rate_limit="100/s")  # sql/claim_rated.sql


@app.task(name="pinned.echo")
def echo(n: int) -> int:
    return n


@app.task(name="pinned.capped", queue="capped")
def capped(n: int) -> int:
    return n


@app.task(name="pinned.group_rated", queue="group_rated")
def group_rated(n: int) -> int:
    return n


@app.task(name="pinned.ordered", queue="ordered")
def ordered(n: int) -> int:
    return n


@app.task(name="pinned.rated", queue="rated")
def rated(n: int) -> int:
    return n


@app.task(name="pinned.on_batch_done")
def on_batch_done(batch: dict[str, int]) -> int:
    return batch["succeeded"]


@app.workflow(name="pinned.flow")
def flow(ctx: pgqueue.Context, key: str) -> list[object]:
    ctx.progress(1, 3, "started")
    first = ctx.step("first", lambda: 1)
    child = ctx.call("child", echo, 2)
    ctx.sleep("nap", 0.2)
    payload = ctx.wait_for_event("wake", event="pinned.go", key=key, timeout=60)
    ctx.progress(3, 3, "done")
    return [first, child, payload]
