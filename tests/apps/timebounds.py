"""Tasks for tests/e2e/test_time_bounds.py: due times past the bounds asked for from task code
(a retry, a durable sleep), and a plain task that must complete beside them."""

from __future__ import annotations

from datetime import UTC, datetime

import pgqueue

app = pgqueue.App()


@app.task(name="timebounds.retry_far", max_attempts=1)
def retry_far() -> None:
    raise pgqueue.RetryAfter(1e300)


@app.workflow(name="timebounds.sleep_far", max_attempts=1)
def sleep_far(ctx: pgqueue.Context) -> str:
    ctx.sleep_until("nap", datetime(9999, 12, 31, 23, 59, tzinfo=UTC))
    return "woke"


@app.workflow(name="timebounds.wait_for_key")
def wait_for_key(ctx: pgqueue.Context, key: str) -> object:
    return ctx.wait_for_event("wait", event="timebounds.tick", key=key, timeout=120)


@app.task(name="timebounds.plain")
def plain(n: int) -> int:
    return n
