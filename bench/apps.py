"""Tasks the benchmarks enqueue and the worker runs: `--app bench.apps:app`.

The App takes its DSN from --dsn (CLI) or PGQUEUE_DSN; the benchmark passes it explicitly.
"""

from __future__ import annotations

from typing import Any

import pgqueue

app = pgqueue.App()

SYNC_QUEUE = "bench"
ASYNC_QUEUE = "bench_async"
OTHER_QUEUE = "other"


@app.task(name="bench.noop", queue=SYNC_QUEUE)
def noop(i: int = 0) -> None:
    """A sync no-op: runs in the worker's thread pool."""


@app.task(name="bench.anoop", queue=ASYNC_QUEUE)
async def anoop(i: int = 0) -> None:
    """An async no-op: runs on the worker's event loop."""


TASKS: dict[str, pgqueue.Task[..., Any]] = {"sync": noop, "async": anoop}
QUEUES = {"sync": SYNC_QUEUE, "async": ASYNC_QUEUE}
