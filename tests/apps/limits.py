"""Tasks for tests/worker/test_semaphores.py: each records when it starts and ends."""

from __future__ import annotations

import time

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()
app.queue("limited", concurrency=2)
app.queue("per_group", group_concurrency=1)


@app.task(name="limits.span", queue="limited")
def span(tag: str, seconds: float) -> str:
    record(f"start:{tag}")
    time.sleep(seconds)
    record(f"end:{tag}")
    return tag


app.queue("overrun", concurrency=3)
app.queue("stubborn", concurrency=1)


@app.task(name="limits.overrun", queue="overrun", timeout=1, max_attempts=1)
def overrun(tag: str, seconds: float) -> None:
    """A sync body that runs on past its timeout: its thread cannot be stopped."""
    record(f"start:{tag}")
    time.sleep(seconds)
    record(f"end:{tag}")


def _noted(ctx: pgqueue.Context, error: str) -> None:
    record(f"hook:{ctx.run_id}")


@app.task(
    name="limits.overrun_hooked", queue="overrun", timeout=1, max_attempts=1, on_failure=_noted
)
def overrun_hooked(tag: str, seconds: float) -> None:
    """overrun, with a hook: its attempt is awaited on the loop, not run wholly in a thread."""
    overrun(tag, seconds)


@app.task(name="limits.stubborn", queue="stubborn", max_attempts=1)
def stubborn(tag: str, seconds: float) -> None:
    """A sync body that does not look at ctx.cancelled: canceled, its thread runs on."""
    record(f"start:{tag}")
    time.sleep(seconds)
    record(f"end:{tag}")
