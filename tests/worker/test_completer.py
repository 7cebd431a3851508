"""The completer alone: outcomes handed in while no write is in flight go in one batch,
and only those whose lease is still valid are written."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import faults as _faults
from pgqueue.db.pool import AsyncCheckedPool
from pgqueue.worker._completer import Completer
from pgqueue.worker.records import Held, Outcome
from tests.db.test_faults import terminate
from tests.helpers import free_port, wait_until
from tests.worker import parts


def test_a_batch_is_written_in_one_statement_and_fenced_by_lease(
    app: pgqueue.App, dsn: str
) -> None:
    @app.task
    def t(i: int) -> None: ...

    t.enqueue_many([(i,) for i in range(3)])
    done, stale, failing = parts.claim(dsn, 3)
    told: list[tuple[int, str, bool]] = []
    batches: list[list[int]] = []

    async def main() -> bool:
        async with parts.pool(dsn) as pool:
            all_told = asyncio.Event()
            wrote = asyncio.Event()

            def written(held: Held, outcome: Outcome, ok: bool) -> None:
                told.append((held.id, outcome.state, ok))
                if len(told) == 2:
                    all_told.set()

            completer = Completer(pool, parts.WORKER_ID, written, wrote.set)
            write = completer._write

            async def counted(outcomes: list[Outcome]) -> set[int]:
                batches.append(sorted(o.id for o in outcomes))
                return await write(outcomes)

            completer._write = counted  # type: ignore[method-assign]
            for row, outcome in [
                (done, Outcome(done.id, done.lease_token, "succeeded", result="7")),
                # not the claim's token (a later claim's, say): the fence keeps it out
                (stale, Outcome(stale.id, str(uuid.uuid4()), "succeeded")),
            ]:
                completer.post(outcome, Held(row.id, row.lease_token, row, app.make_context(row)))
            failed = Outcome(failing.id, failing.lease_token, "failed", error="boom")
            submitted = asyncio.ensure_future(completer.submit(failed))
            await asyncio.sleep(0)  # the submit is queued before the writer starts
            writer = asyncio.create_task(completer.run())
            try:
                ok = await asyncio.wait_for(submitted, 10)
                await asyncio.wait_for(all_told.wait(), 10)
                await asyncio.wait_for(completer.settled(), 10)
                assert wrote.is_set()
                assert completer.unwritten == 0
            finally:
                writer.cancel()
            return ok

    assert asyncio.run(main()) is True
    assert batches == [sorted([done.id, stale.id, failing.id])]
    assert sorted(told) == sorted([(done.id, "succeeded", True), (stale.id, "succeeded", False)])
    assert parts.states(dsn) == {done.id: "succeeded", stale.id: "running", failing.id: "failed"}
    assert app.get_run(done.id).result == 7


def test_outcomes_wait_out_an_outage_unwritten(app: pgqueue.App, dsn: str) -> None:
    """A write that fails for the database being unreachable is retried with the same
    outcomes; nothing is told before it lands."""

    @app.task
    def t() -> None: ...

    t.enqueue()
    (row,) = parts.claim(dsn, 1)
    failures = 2

    async def main() -> None:
        nonlocal failures
        async with parts.pool(dsn) as pool:
            completer = Completer(pool, parts.WORKER_ID, lambda *_: None, lambda: None)
            write = completer._write

            async def flaky(outcomes: list[Outcome]) -> Any:
                nonlocal failures
                if failures:
                    failures -= 1
                    raise psycopg.OperationalError("connection refused")
                return await write(outcomes)

            completer._write = flaky  # type: ignore[method-assign]
            writer = asyncio.create_task(completer.run())
            try:
                outcome = Outcome(row.id, row.lease_token, "succeeded", result="null")
                assert await asyncio.wait_for(completer.submit(outcome), 10)
            finally:
                writer.cancel()

    asyncio.run(main())
    assert failures == 0
    assert parts.states(dsn) == {row.id: "succeeded"}


def test_killed_idle_connections_cost_no_failed_write(
    app: pgqueue.App, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every idle connection of the pool was killed (pg_terminate_backend): the write goes
    through a fresh one, at once, and nothing is logged."""

    @app.task
    def t() -> None: ...

    t.enqueue()
    (row,) = parts.claim(dsn, 1)
    caplog.set_level(logging.INFO, "pgqueue.worker")

    async def main() -> bool:
        pool = AsyncCheckedPool(
            dsn, min_size=2, max_size=2, kwargs={"autocommit": True}, open=False
        )
        async with pool:
            await pool.wait(10)
            conns = [await pool.getconn() for _ in range(2)]
            pids = [c.info.backend_pid for c in conns]
            for c in conns:
                await pool.putconn(c)
            await asyncio.to_thread(terminate, dsn, pids)  # and gone
            # the server's goodbye reaches each socket a moment after the backend is gone
            await asyncio.to_thread(
                wait_until, lambda: all(_faults.dead(c) for c in conns), 5, 0.01, "goodbyes"
            )
            completer = Completer(pool, parts.WORKER_ID, lambda *_: None, lambda: None)
            writer = asyncio.create_task(completer.run())
            try:
                outcome = Outcome(row.id, row.lease_token, "succeeded", result="1")
                return await asyncio.wait_for(completer.submit(outcome), 10)
            finally:
                writer.cancel()

    assert asyncio.run(main()) is True
    assert parts.states(dsn) == {row.id: "succeeded"}
    # (psycopg_pool says it discarded the dead connections; pgqueue has nothing to say)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("pgqueue")] == []


def test_tries_go_on_at_most_a_third_of_the_remaining_lease_apart(dsn: str) -> None:
    """The database is gone (a port nobody listens on): the completer tries again at once,
    then backs off, never waiting longer than a third of what is left of the lease."""
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    tries: list[float] = []

    async def main() -> float:
        pool = AsyncCheckedPool(
            nowhere, min_size=1, kwargs={"autocommit": True}, timeout=0.2, open=False
        )
        await pool.open(wait=False)
        expires = time.monotonic() + 2.0
        completer = Completer(
            pool, parts.WORKER_ID, lambda *_: None, lambda: None, lambda: expires - time.monotonic()
        )
        write = completer._write

        async def counted(outcomes: list[Outcome]) -> set[int]:
            tries.append(time.monotonic())
            return await write(outcomes)

        completer._write = counted  # type: ignore[method-assign]
        writer = asyncio.create_task(completer.run())
        completer.post(Outcome(1, "x", "succeeded", result="1"), None)  # type: ignore[arg-type]
        try:
            while time.monotonic() < expires:
                await asyncio.sleep(0.05)  # the span measured, not a synchronisation
        finally:
            writer.cancel()
            await pool.close()
        return expires

    expires = asyncio.run(main())
    before_expiry = [t for t in tries if t < expires]
    assert len(before_expiry) >= 4
    for before, after in itertools.pairwise(before_expiry):
        # each try waits for the pool (0.2 s) plus at most a third of what was left
        assert after - before <= 0.2 + max(Completer.RETRY_MIN, (expires - before) / 3) + 0.15
