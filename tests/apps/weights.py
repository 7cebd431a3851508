"""Tasks for tests/worker/test_group_weights.py: queues whose groups have weights."""

from __future__ import annotations

import time

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()
# gold 3, silver 2, every other group 1
app.queue("weighted", concurrency=6, group_weights={"gold": 3, "silver": 2})
app.queue("weighted_slow", concurrency=4, group_weights={"gold": 3, "silver": 2})


@app.task(name="weights.tick", queue="weighted")
def tick(n: int) -> int:
    return n


@app.task(name="weights.span", queue="weighted_slow")
def span(tag: str, seconds: float) -> str:
    record(f"start:{tag}")
    time.sleep(seconds)
    record(f"end:{tag}")
    return tag
