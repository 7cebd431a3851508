"""chancy's side of bench.compare: its jobs and its worker program, as its docs show
(`async with Chancy(dsn) as chancy: async with Worker(chancy) as worker: await
worker.wait_for_shutdown()`)."""

from __future__ import annotations

import asyncio
import os

from chancy import Chancy, Queue, Worker, job  # type: ignore[import-untyped]

from bench.pingback import DSN_ENV, QUEUE, ping_back


@job(queue=QUEUE)  # type: ignore[untyped-decorator]
async def noop(i: int = 0) -> None:
    """No-op."""


@job(queue=QUEUE)  # type: ignore[untyped-decorator]
async def ping(i: int = 0) -> None:
    ping_back(i)


def queue() -> Queue:
    """The benchmark's queue at chancy's defaults (polling_interval 5 s, the executor's
    own concurrency), but for the executor: the tasks are coroutines, which its default
    (a process pool) does not run; its docs name the asyncio executor for them."""
    return Queue(QUEUE, executor=Chancy.Executor.Async)


def main() -> None:
    async def run() -> None:
        async with Chancy(os.environ[DSN_ENV]) as chancy, Worker(chancy) as worker:
            await worker.wait_for_shutdown()

    asyncio.run(run())


if __name__ == "__main__":
    main()
