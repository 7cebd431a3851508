"""The producer alone, with an executor and a completer but no Worker: a claim round
fills the free slots, queue after queue, and claims nothing once every slot is taken.
And an idle worker's pickup: the listener has a notified run claimed on a connection of the
pool, and its own connection only ever LISTENs."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import psycopg

import pgqueue
from pgqueue.worker import executor_for
from pgqueue.worker._completer import Completer
from pgqueue.worker._permits import ZombiePermits
from pgqueue.worker._threads import DaemonThreads
from pgqueue.worker._transitions import Transitions
from pgqueue.worker.maintenance.lease_keeper import LeaseKeeper
from pgqueue.worker.maintenance.queue_limits import QueueLimits
from pgqueue.worker.producer import Producer
from tests.helpers import InProcessWorker, wait_until
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
        transitions = Transitions(None, stats)
        async with parts.pool(dsn) as pool:
            wake, stop = asyncio.Event(), asyncio.Event()
            completer = Completer(pool, parts.WORKER_ID, transitions.written, wake.set)
            limits = QueueLimits(pool)
            await limits.refresh()
            permits = ZombiePermits(parts.WORKER_ID, 30, pool, limits)
            executor = executor_for(
                app,
                parts.WORKER_ID,
                DaemonThreads(6),
                30,
                stats,
                transitions,
                wake.set,
                completer,
                permits,
                stop,
            )
            keeper = LeaseKeeper(dsn, parts.WORKER_ID, 30, executor.leases, lambda gone: None)
            producer = Producer(
                executor,
                completer,
                keeper,
                pool,
                limits,
                no_stage,
                wake,
                stop,
                parts.WORKER_ID,
                ["a", "b"],
                6,
                30,
                5.0,
                stats,
            )
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


def last_query(dsn: str, pid: int | None) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    assert row is not None, f"no backend {pid}"
    return str(row[0])


def settled(w: Any) -> bool:
    """The worker is idle: nothing held, no claim on its way, no wake-up pending."""
    p = w.producer
    return bool(not w.executor.held and p.idle() and p._wake is not None and not p._wake.is_set())


def test_an_idle_worker_picks_up_a_notified_run_and_its_listener_only_listens(
    app: pgqueue.App,
) -> None:
    ran: list[int] = []

    @app.task(queue="pings")
    async def ping(i: int) -> None:
        ran.append(i)

    # no poll for a minute: only the NOTIFY finds the runs
    with InProcessWorker(app, queues=["pings"], concurrency=4, poll_interval=60) as w:
        pid = w.listener.backend_pid
        assert pid is not None and "LISTEN" in last_query(app.dsn, pid)
        for i in range(3):
            wait_until(lambda: settled(w), message="an idle worker")
            run_id = ping.enqueue(i).id
            wait_until(lambda: app.get_run(run_id).state == "succeeded", timeout=10)  # noqa: B023
            assert w.stats["picked_up"] == i + 1  # by the listener, not the claim loop
            # not on the listener's connection: a claim's rows there would arrive behind
            # every notification sent before them (pgqueue.worker.notifications)
            assert w.listener.backend_pid == pid
            assert "LISTEN" in last_query(app.dsn, pid)
        assert w.stats["claimed"] == 3
    assert ran == [0, 1, 2]


def test_a_pickup_takes_only_the_free_slots(app: pgqueue.App) -> None:
    gate = threading.Event()
    running: list[int] = []
    most: list[int] = [0]

    @app.task(queue="pings")
    async def hold(i: int) -> None:
        running.append(i)
        most[0] = max(most[0], len(running))
        await asyncio.to_thread(gate.wait, 20)
        running.remove(i)

    try:
        with InProcessWorker(app, queues=["pings"], concurrency=2, poll_interval=60) as w:
            wait_until(lambda: settled(w), message="an idle worker")
            handles = hold.enqueue_many([(i,) for i in range(5)])  # one NOTIFY
            wait_until(lambda: len(running) == 2, message="two runs started")
            assert w.stats["picked_up"] == 2  # all the free slots, no more
            # every slot is taken: a NOTIFY now wakes the claim loop, which claims nothing
            late = hold.enqueue(5)
            wait_until(lambda: w.producer._wake is not None and not w.producer._wake.is_set())
            assert w.stats["picked_up"] == 2 and w.stats["claimed"] == 2
            with psycopg.connect(app.dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pgqueue.runs WHERE state = 'running'"
                ).fetchone()
            assert row == (2,)
            gate.set()
            ids = [h.id for h in [*handles, late]]
            wait_until(lambda: set(parts.states(app.dsn).values()) == {"succeeded"}, timeout=15)
            assert sorted(parts.states(app.dsn)) == sorted(ids)
        assert most[0] == 2
        assert w.stats["claimed"] == 6
    finally:
        gate.set()
