"""awa-pg's side of bench.compare: the job argument types and the worker program, as
its README shows (`AsyncClient(url)`, `@client.task(Args, queue=...)`, `await
client.start(...)`)."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from typing import Any

from bench.pingback import DSN_ENV, QUEUE, chain_link, ping_back


@dataclass
class Noop:
    i: int


@dataclass
class Ping:
    i: int


@dataclass
class Chain:
    i: int
    step: int


def main() -> None:
    from awa import AsyncClient

    async def run() -> None:
        client = AsyncClient(os.environ[DSN_ENV])

        @client.task(Noop, queue=QUEUE)
        async def noop(job: Any) -> None:
            """No-op."""

        @client.task(Ping, queue=QUEUE)
        async def ping(job: Any) -> None:
            ping_back(job.args.i)

        @client.task(Chain, queue=QUEUE)
        async def chain(job: Any) -> None:
            i, step = job.args.i, job.args.step
            if chain_link(i, step):
                await client.insert(Chain(i, step + 1), queue=QUEUE)

        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await client.start()  # its defaults: the queues its tasks declare
        await stop.wait()
        await client.shutdown()

    asyncio.run(run())


if __name__ == "__main__":
    main()
