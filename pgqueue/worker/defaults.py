"""What a worker given no concurrency runs at once (docs/operations.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pgqueue.tasks.task import Task

# The concurrency of a worker given none: ASYNC_CONCURRENCY when every task of the app is
# a coroutine function (a run waiting on I/O costs a coroutine, and claims of 50 cost the
# server less per run than claims of 5), else SYNC_CONCURRENCY (each slot of a sync task
# is a thread, and more threads than that only contend for the GIL).
ASYNC_CONCURRENCY = 100
SYNC_CONCURRENCY = 10


def default_concurrency(app_tasks: Iterable[Task[Any, Any]]) -> int:
    """ASYNC_CONCURRENCY if every task of the app is async (and there is one), else
    SYNC_CONCURRENCY. Every task of the app, not only those declaring a served queue: a
    run of any task may be routed to any queue (`.options(queue=...)`), so the tasks
    are all a worker knows it may run. An `async def` workflow counts as async: it
    waits on the loop, and only its durable writes take a thread for a moment.
    The one place the default is decided: `Worker`, and through it `app.worker()`,
    `pgqueue worker`, `manage.py pgqueue worker` and `flask pgqueue worker`."""
    tasks = list(app_tasks)
    if tasks and all(t.is_async for t in tasks):
        return ASYNC_CONCURRENCY
    return SYNC_CONCURRENCY
