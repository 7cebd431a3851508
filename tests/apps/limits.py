"""Tasks for tests/test_semaphores.py: each records when it starts and ends."""

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
