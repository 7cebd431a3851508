"""The completer alone: outcomes handed in while no write is in flight go in one batch,
and only those whose lease is still valid are written."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pgqueue
from pgqueue.worker._completer import Completer, Outcome
from pgqueue.worker.attempt import Held
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
    import psycopg

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
