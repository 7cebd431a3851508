"""Tasks for tests/worker/test_flow_control.py: rate-limited and ordered queues."""

from __future__ import annotations

import time

import psycopg

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


# Backoffs (tests/worker/test_backoff.py): "backoffs" has no limits, "backoffs_capped" a
# group concurrency; "bystanders" is another queue, which a backoff must not touch.
app.queue("backoffs_capped", group_concurrency=5)


def already(tag: str) -> bool:
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM effects WHERE tag = %s", (tag,)).fetchone()
    return row is not None


@app.task(name="flow.hit", queue="backoffs", group=lambda group, n, scope=None, seconds=0: group)
def hit(group: str | None, n: int, scope: str | None = None, seconds: float = 0) -> int:
    """With `scope`, the first attempt raises RetryAfter(seconds, scope=scope) (once per
    group and n: the effects table remembers); every start is recorded."""
    record(f"start:{group}:{n}")
    if scope is not None and not already(f"backoff:{group}:{n}"):
        record(f"backoff:{group}:{n}")
        raise pgqueue.RetryAfter(seconds, scope=scope)
    time.sleep(0.02)
    return n


# Priority aging (tests/worker/test_aging.py): a step every 0.1 s.
app.queue("aging", priority_aging=0.1)


@app.task(name="flow.aged", queue="aging")
def aged(n: int) -> int:
    time.sleep(0.05)
    return n
