"""Tasks for tests/worker/test_recycling.py."""

from __future__ import annotations

import time

import pgqueue

app = pgqueue.App()
_kept: list[bytes] = []


@app.task(name="recycle.noop")
def noop(n: int) -> int:
    return n


@app.task(name="recycle.leak")
def leak(mb: int) -> None:
    """Keeps `mb` MiB for good, written (so that it is resident), as a leaking task does."""
    _kept.append(b"\x01" * (mb << 20))
    time.sleep(0.05)  # a task's work: the worker looks at its RSS ten times a second
