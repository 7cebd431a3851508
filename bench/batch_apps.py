"""Tasks for bench/batches.py: `--app bench.batch_apps:app`. An async no-op member and
the batch's callback, in a queue of their own."""

from __future__ import annotations

import pgqueue

app = pgqueue.App()

QUEUE = "bench_batch"


@app.task(name="bench.batch_member", queue=QUEUE)
async def member(i: int = 0) -> None:
    """An async no-op: what a batch adds shows against the least a run costs."""


@app.task(name="bench.batch_done", queue=QUEUE)
async def done(batch: dict[str, int]) -> None:
    """The batch's callback."""
