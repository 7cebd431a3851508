"""The producer alone, with an executor and a completer but no Worker: a claim round
fills the free slots, queue after queue, and claims nothing once every slot is taken."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pgqueue
from pgqueue.worker._completer import Completer
from pgqueue.worker._transitions import Transitions
from pgqueue.worker.executor import Executor
from pgqueue.worker.maintenance.lease_keeper import LeaseKeeper
from pgqueue.worker.maintenance.queue_limits import QueueLimits
from pgqueue.worker.producer import Producer
from tests.worker import parts


async def no_stage() -> tuple[int, Any]:
    return 0, None


def test_a_claim_round_fills_the_free_slots_across_queues(app: pgqueue.App, dsn: str) -> None:
    release = asyncio.Event()  # made on the loop below, before any attempt awaits it
    started: list[int] = []

    @app.task(queue="a")
    async def a(i: int) -> None:
        started.append(i)
        await release.wait()

    @app.task(queue="b")
    async def b(i: int) -> None:
        started.append(i)
        await release.wait()

    a.enqueue_many([(i,) for i in range(2)])  # fewer than the slots
    b.enqueue_many([(i,) for i in range(10, 20)])
    rounds: list[tuple[int, bool]] = []
    held: list[int] = []

    async def main() -> None:
        stats: Counter[str] = Counter()
        executor = Executor(app, parts.WORKER_ID, 6, 30, stats, Transitions(None))
        producer = Producer(app, executor, parts.WORKER_ID, ["a", "b"], 6, 30, 5.0, stats)
        executor.freed = producer.wake
        async with parts.pool(dsn) as pool:
            completer = Completer(pool, parts.WORKER_ID, executor.written, producer.wake)
            stop = asyncio.Event()
            executor.open(completer, stop)
            limits = QueueLimits(pool)
            await limits.refresh()
            keeper = LeaseKeeper(dsn, parts.WORKER_ID, 30, executor.leases, lambda gone: None)
            producer.open(stop, pool, completer, limits, keeper, no_stage)
            writer = asyncio.create_task(completer.run())

            async def settle() -> None:
                async def idle() -> None:
                    while executor.held or executor.executing:
                        await asyncio.sleep(0.01)
                    await completer.settled()

                await asyncio.wait_for(idle(), 10)

            try:
                rounds.append(await producer._claim_round(0))  # a's 2, then 4 of b's
                held.append(len(executor.held))
                rounds.append(await producer._claim_round(0))  # every slot is taken
                release.set()
                await settle()
                rounds.append(await producer._claim_round(1))  # b first: b's last 6
                await settle()
            finally:
                writer.cancel()
        assert stats["claimed"] == 12
        assert stats["succeeded"] == 12

    asyncio.run(main())
    assert rounds[0] == (6, True)  # b's claim got all it asked for: b may hold more
    assert held == [6]
    assert rounds[1] == (0, False)
    assert rounds[2] == (6, True)
    assert sorted(started[:6]) == [0, 1, 10, 11, 12, 13]  # by (priority, id), per queue
    assert sorted(started) == [0, 1, *range(10, 20)]
    assert set(parts.states(dsn).values()) == {"succeeded"}
