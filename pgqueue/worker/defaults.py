"""What a worker given no concurrency runs at once (docs/operations.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pgqueue.tasks.task import Task

# The concurrency of a worker given none: ASYNC_CONCURRENCY when every task it serves is a
# coroutine function (a run waiting on I/O costs a coroutine, and claims of 50 cost the
# server less per run than claims of 5), else SYNC_CONCURRENCY (each slot of a sync task
# is a thread, and more threads than that only contend for the GIL).
ASYNC_CONCURRENCY = 100
SYNC_CONCURRENCY = 10


def default_concurrency(app_tasks: Iterable[Task[Any, Any]], queues: list[str]) -> int:
    """ASYNC_CONCURRENCY if every task the worker may run is async (and there is one),
    else SYNC_CONCURRENCY. The tasks it may run are those of the app (`app_tasks`) that
    declare a queue in `queues`; when none does (runs reach the queue through
    `.options(queue=...)`), any task of the app. Workflows are sync (their steps run in a
    thread)."""
    every = list(app_tasks)
    served = set(queues)
    tasks = [t for t in every if t.queue in served] or every
    if tasks and all(t.is_async for t in tasks):
        return ASYNC_CONCURRENCY
    return SYNC_CONCURRENCY
