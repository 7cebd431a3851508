"""Tasks for tests/worker/test_blocked_loop.py: async task code that blocks the event loop."""

from __future__ import annotations

import time

import pgqueue

app = pgqueue.App()


@app.task(name="blocking.sleepy", max_attempts=1)
async def sleepy(seconds: float) -> str:
    time.sleep(seconds)  # the mistake: a blocking call in an async task
    return "slept"
