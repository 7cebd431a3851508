"""oban-py's side of bench.compare: its workers (resolved by the `oban start` process from
their import path) and the benchmark's client. oban needs Python 3.12+."""

from __future__ import annotations

from typing import Any

from oban import Job, Oban, worker

from bench.pingback import QUEUE, chain_link, ping_back


@worker(queue=QUEUE)
class Noop:
    async def process(self, job: Job) -> None:
        """No-op."""


@worker(queue=QUEUE)
class Ping:
    async def process(self, job: Job) -> None:
        ping_back(int(job.args["i"]))


@worker(queue=QUEUE)
class Chain:
    async def process(self, job: Job) -> None:
        i, step = int(job.args["i"]), int(job.args["step"])
        if chain_link(i, step):
            await Chain.enqueue({"i": i, "step": step + 1})  # type: ignore[attr-defined]


async def open_client(url: str) -> tuple[Any, Oban]:
    """A client as oban's docs embed one: `Oban(pool=pool)` with no queues (it only
    enqueues), started with `async with`."""
    pool = await Oban.create_pool(url)
    oban = Oban(pool=pool)
    await oban.__aenter__()
    return pool, oban


def new(kind: str, args: dict[str, int]) -> Job:
    cls = {"noop": Noop, "ping": Ping, "chain": Chain}[kind]
    return cls.new(args)  # type: ignore[attr-defined,no-any-return]
