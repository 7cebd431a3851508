"""The lease keeper alone, on its own thread: it extends the leases the loop holds, and
reports on the loop the ones it could not extend (lost: expired, rescued or canceled)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import time
import weakref
from collections import Counter
from datetime import timedelta

import psycopg
import pytest

import pgqueue
from pgqueue.worker import executor_for
from pgqueue.worker._completer import Completer
from pgqueue.worker._permits import ZombiePermits
from pgqueue.worker._threads import DaemonThreads
from pgqueue.worker._transitions import Transitions
from pgqueue.worker.maintenance.lease_keeper import LeaseKeeper
from pgqueue.worker.maintenance.queue_limits import QueueLimits
from pgqueue.worker.records import Claimed, Held
from tests.helpers import free_port, scalar, wait_until
from tests.worker import parts


def lease_left(dsn: str, run_id: int) -> timedelta:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT lease_expires_at - now() FROM pgqueue.runs WHERE id = %s", (run_id,)
        ).fetchone()
    assert row is not None
    left: timedelta = row[0]
    return left


def test_held_leases_are_renewed_and_a_lost_one_is_reported(app: pgqueue.App, dsn: str) -> None:
    @app.task
    def t() -> None: ...

    t.enqueue_many([(), ()])
    kept, lost = parts.claim(dsn, 2, lease_seconds=2)
    with psycopg.connect(dsn, autocommit=True) as conn:  # canceled meanwhile
        conn.execute("SELECT pgqueue.cancel(%s)", (lost.id,))
    leases = [(kept.id, kept.lease_token), (lost.id, lost.lease_token)]
    reported: list[list[tuple[int, str]]] = []

    async def main() -> None:
        told = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_lost(gone: list[tuple[int, str]]) -> None:
            assert asyncio.get_running_loop() is loop  # told on the loop, not the thread
            reported.append(gone)
            told.set()

        keeper = LeaseKeeper(dsn, parts.WORKER_ID, 60, lambda: list(leases), on_lost)
        keeper.start()  # renews at once, then every 20 s
        try:
            await asyncio.wait_for(told.wait(), 10)
        finally:
            await asyncio.to_thread(keeper.stop)

    asyncio.run(main())
    assert reported == [[(lost.id, lost.lease_token)]]
    assert lease_left(dsn, kept.id) > timedelta(seconds=50)  # claimed for 2 s, renewed for 60


def test_claims_since_the_last_snapshot_are_renewed_when_the_loop_does_not_answer(
    app: pgqueue.App, dsn: str
) -> None:
    """A blocked loop cannot say what it holds: the thread renews what the last answer
    held plus every claim added since."""

    @app.task
    def t() -> None: ...

    t.enqueue()
    (row,) = parts.claim(dsn, 1, lease_seconds=2)
    keeper = LeaseKeeper(dsn, parts.WORKER_ID, 60, lambda: [], lambda gone: None)
    keeper.add([row])
    try:
        assert keeper.renew() == 20  # (no loop: no snapshot) the next one a third on
    finally:
        keeper._close()  # its connection; the thread, never started, would close it
    assert lease_left(dsn, row.id) > timedelta(seconds=50)


def test_permits_of_attempts_no_longer_running_here_are_swept(app: pgqueue.App, dsn: str) -> None:
    """pgqueue.cancel() files the permit of every attempt it cancels, one whose code had
    just ended too: with the loop's list of what still runs, a renewal deletes this
    worker's other permits. Without that list (the loop did not answer) it deletes none."""

    @app.task
    def t() -> None: ...

    t.enqueue()
    (row,) = parts.claim(dsn, 1, lease_seconds=60)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version)"
            " VALUES (%s, 'h', 1, '{default}', 1, 'x') ON CONFLICT DO NOTHING",
            (parts.WORKER_ID,),
        )
        conn.execute(
            """INSERT INTO pgqueue.zombie_permits
                   (lease_token, run_id, worker_id, queue, group_key, lease_seconds, created_at)
               VALUES (%(running)s, %(id)s, %(w)s, 'default', '', 60, now() - interval '5 s'),
                      (gen_random_uuid(), 0, %(w)s, 'default', '', 60, now() - interval '5 s'),
                      (gen_random_uuid(), 0, %(w)s, 'default', '', 60, now())""",
            {"running": row.lease_token, "id": row.id, "w": parts.WORKER_ID},
        )

    def permits() -> int:
        return int(scalar(dsn, "SELECT count(*) FROM pgqueue.zombie_permits"))

    keeper = LeaseKeeper(dsn, parts.WORKER_ID, 60, lambda: [], lambda gone: None)
    keeper.add([row])
    try:
        keeper.renew()  # no loop to answer: nothing is known to have ended
    finally:
        keeper._close()
    assert permits() == 3

    async def main() -> None:
        keeper = LeaseKeeper(
            dsn,
            parts.WORKER_ID,
            60,
            lambda: [(row.id, row.lease_token)],
            lambda gone: None,
            lambda: [row.lease_token],
        )
        keeper.start()  # renews at once
        try:
            while permits() != 2:  # the stale one goes; the running one and the new one stay
                await asyncio.sleep(0.05)
        finally:
            await asyncio.to_thread(keeper.stop)

    asyncio.run(asyncio.wait_for(main(), 10))
    assert (
        scalar(dsn, "SELECT count(*) FROM pgqueue.zombie_permits WHERE run_id = %s", (row.id,)) == 1
    )


def test_a_claim_is_remembered_by_its_leases_not_its_rows() -> None:
    """add() leaves the thread the loop's held leases plus the claim's, as (id, token)
    pairs: a run's arguments must not live until the next renewal (at thousands of runs a
    second they filled the collector's oldest generation and the worker's memory)."""

    class Argument:
        pass

    arg = Argument()
    alive = weakref.ref(arg)
    row = Claimed(7, "t", "default", [arg], {}, 1, 1, None, "token", 0, "", None, 0.0, False, None)
    held = [(5, "older")]
    keeper = LeaseKeeper("", parts.WORKER_ID, 60, lambda: list(held), lambda gone: None)
    keeper.add([row])
    del row, arg
    gc.collect()
    assert alive() is None
    assert keeper._latest == [(5, "older"), (7, "token")]
    held = [(7, "token")]  # the earlier lease ended, the claimed run is held now
    keeper.add([])
    assert keeper._latest == [(7, "token")]  # one list, as long as what is held


def test_a_killed_connection_costs_no_failed_renewal(
    app: pgqueue.App, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server kills the keeper's connection between two renewals (as a failover, a
    pooler restart or pg_terminate_backend do): the next renewal sees the connection is
    dead before it uses it, and renews on a fresh one, on time, with nothing logged."""

    @app.task
    def t() -> None: ...

    t.enqueue()
    (row,) = parts.claim(dsn, 1, lease_seconds=3)
    caplog.set_level(logging.INFO, "pgqueue.worker")

    renewals = [0]

    class Counted(LeaseKeeper):
        def renew(self) -> float:
            every = super().renew()
            renewals[0] += 1
            return every

    async def main() -> list[int]:
        keeper = Counted(dsn, parts.WORKER_ID, 3, lambda: [(row.id, row.lease_token)], print)
        keeper.start()  # renews at once, then every second
        pids = []
        try:
            for i in range(3):
                await asyncio.to_thread(
                    wait_until, lambda n=i: renewals[0] > n, 5, 0.01, f"renewal {i + 1}"
                )
                conn = keeper._conn
                assert conn is not None
                pids.append(conn.info.backend_pid)
                with psycopg.connect(dsn, autocommit=True) as killer:
                    killer.execute("SELECT pg_terminate_backend(%s)", (pids[-1],))
            await asyncio.to_thread(wait_until, lambda: renewals[0] > 3, 5, 0.01, "renewal 4")
        finally:
            await asyncio.to_thread(keeper.stop)
        return pids

    pids = asyncio.run(main())
    assert len(set(pids)) == 3  # a fresh connection each time
    assert lease_left(dsn, row.id) > timedelta(seconds=1.5)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []


def test_retries_never_wait_past_a_third_of_what_is_left_of_the_lease(dsn: str) -> None:
    """With the database gone (a port nobody listens on), tries come at most a third of
    the remaining lease apart, so several land before the leases expire."""
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"  # refused
    tries: list[float] = []

    class Counted(LeaseKeeper):
        def renew(self) -> float:
            tries.append(time.monotonic())
            return super().renew()

    async def main() -> float:
        keeper = Counted(nowhere, parts.WORKER_ID, 3, lambda: [(1, "x")], print)
        keeper.start()
        started = keeper.valid_until - 3
        try:
            await asyncio.to_thread(
                wait_until, lambda: tries and tries[-1] > started + 3, 10, 0.01, "the expiry"
            )
        finally:
            await asyncio.to_thread(keeper.stop)
        return started

    started = asyncio.run(main())
    expires = started + 3
    for before, after in itertools.pairwise(tries):
        if after < expires:
            assert after - before <= max(LeaseKeeper.RETRY_MIN, (expires - before) / 3) + 0.15
    assert sum(1 for t in tries if t < expires) >= 6  # doubling up to lease / 3: 4


def test_an_outcome_not_written_yet_keeps_its_lease(app: pgqueue.App, dsn: str) -> None:
    """An attempt's outcome goes to the completer and its slot is freed at once; until the
    write lands the run is still this worker's, so its lease is renewed like a running
    one. Else a loop blocked (by task code) between the two lets the lease expire, and a
    run that succeeded is rescued and runs again. Here the completer does not run at all
    until a renewal has come and gone."""
    ran: list[int] = []

    @app.task
    async def quick() -> None:
        ran.append(1)

    quick.enqueue()
    (row,) = parts.claim(dsn, 1, lease_seconds=2)

    async def main() -> None:
        stats: Counter[str] = Counter()
        transitions = Transitions(None, stats)
        async with parts.pool(dsn) as pool:
            completer = Completer(pool, parts.WORKER_ID, transitions.written, lambda: None)
            permits = ZombiePermits(parts.WORKER_ID, 2, pool, QueueLimits(pool))
            executor = executor_for(
                app,
                parts.WORKER_ID,
                DaemonThreads(1),
                2,
                stats,
                transitions,
                lambda: None,
                completer,
                permits,
                asyncio.Event(),
            )
            held = Held(row.id, row.lease_token, row, app.make_context(row))
            executor.held.add(held)
            await executor.execute(held, quick)  # its outcome is handed in, and its slot freed
            assert ran == [1] and not executor.held and completer.unwritten == 1
            keeper = LeaseKeeper(dsn, parts.WORKER_ID, 60, executor.leases, executor.leases_lost)
            keeper.start()  # renews at once (the loop answers: it awaits below)
            try:
                renewed = await asyncio.to_thread(
                    wait_until,
                    lambda: lease_left(dsn, row.id) > timedelta(seconds=30),
                    5,
                    message="the renewal",
                )
            finally:
                await asyncio.to_thread(keeper.stop)
            assert renewed
            writer = asyncio.create_task(completer.run())
            try:
                await asyncio.wait_for(completer.settled(), 10)
            finally:
                writer.cancel()
        assert stats["succeeded"] == 1

    asyncio.run(main())
    assert parts.states(dsn) == {row.id: "succeeded"}
