"""The lease keeper alone, on its own thread: it extends the leases the loop holds, and
reports on the loop the ones it could not extend (lost: expired, rescued or canceled)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from datetime import timedelta

import psycopg

import pgqueue
from pgqueue.worker._claimed import Claimed
from pgqueue.worker.maintenance.lease_keeper import LeaseKeeper
from tests.helpers import scalar
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
    row = Claimed(7, "t", "default", [arg], {}, 1, 1, None, "token", 0, "", None, 0.0, False)
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
