"""The asyncio API: enqueue_async, wait_async, get_run_async, joined AsyncConnections."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import psycopg
import pytest

import pgqueue
from tests.helpers import InProcessWorker, scalar


@pytest.fixture
def double(app: pgqueue.App) -> pgqueue.Task[Any, Any]:
    @app.task(name="double", queue="math")
    async def double(x: int) -> int:
        return x * 2

    return double


def test_enqueue_wait_and_get_async(app: pgqueue.App, double: Any) -> None:
    async def main() -> tuple[Any, pgqueue.Run, list[int]]:
        h = await double.enqueue_async(21)
        many = await double.enqueue_many_async([(1,), {"x": 2}])
        result = await h.wait_async(timeout=10)
        results = await asyncio.gather(*(m.wait_async(timeout=10) for m in many))
        return result, await app.get_run_async(h.id), results

    with InProcessWorker(app, queues=["math"]):
        result, run, results = asyncio.run(main())
    assert (result, run.state, run.result, run.queue, results) == (
        42,
        "succeeded",
        42,
        "math",
        [2, 4],
    )


def test_async_calls_from_several_event_loops(app: pgqueue.App, double: Any) -> None:
    """Each asyncio.run() is a new loop: the App opens a pool on each."""
    ids = [asyncio.run(double.enqueue_async(i)).id for i in range(3)]
    assert [asyncio.run(app.get_run_async(i)).args for i in ids] == [[0], [1], [2]]

    async def close() -> None:
        await app.aclose()

    asyncio.run(close())


def test_enqueue_async_joins_an_async_transaction(app: pgqueue.App, double: Any, dsn: str) -> None:
    async def main() -> int:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            async with conn.transaction(force_rollback=True):
                await double.options(conn=conn).enqueue_async(1)
                assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 0  # not committed
            async with conn.transaction():
                h = await double.options(conn=conn, idempotency_key="once").enqueue_async(2)
                again = await double.options(conn=conn, idempotency_key="once").enqueue_async(2)
                assert (h.created, again.created, again.id) == (True, False, h.id)
            return h.id

    run_id = asyncio.run(main())
    assert scalar(dsn, "SELECT array_agg(id) FROM pgqueue.runs") == [run_id]


def test_async_errors_say_what_to_do(app: pgqueue.App, double: Any, dsn: str) -> None:
    async def main() -> None:
        with pytest.raises(pgqueue.RunNotFound):
            await app.get_run_async(999_999)
        with pytest.raises(TimeoutError, match="still queued"):
            await (await double.enqueue_async(1)).wait_async(timeout=0.2, poll_interval=0.05)
        with (
            psycopg.connect(dsn) as sync_conn,
            pytest.raises(TypeError, match="use enqueue\\(\\)"),
        ):
            await double.options(conn=sync_conn).enqueue_async(1)
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            with pytest.raises(TypeError, match="use enqueue_async"):
                double.options(conn=aconn).enqueue(1)
        broken = pgqueue.App("postgresql://nobody@127.0.0.1:1/nothing")
        with pytest.raises(pgqueue.ConfigError, match="cannot connect"):
            await broken.get_run_async(1)

    asyncio.run(main())


def test_concurrent_enqueue_async_calls_share_one_commit(dsn: str) -> None:
    """Single-run enqueue_async calls made in one pass of the loop are written by one
    statement (one transaction: one created_at), the first caller's included, and each
    caller gets its own run back."""
    app = pgqueue.App(dsn, pool_size=1)

    @app.task(name="echo")
    async def echo(x: int) -> int:
        return x

    async def main() -> list[pgqueue.RunHandle]:
        try:
            return list(await asyncio.gather(*(echo.enqueue_async(i) for i in range(40))))
        finally:
            await app.aclose()

    try:
        handles = asyncio.run(main())
        runs = [app.get_run(h.id) for h in handles]
    finally:
        app.close()
    assert [r.args for r in runs] == [[i] for i in range(40)]
    assert [h.id for h in handles] == sorted(h.id for h in handles)
    assert len({r.created_at for r in runs}) == 1  # 40 without group commit


async def blocked_inserts(dsn: str, locker: psycopg.AsyncConnection[Any], n: int) -> None:
    """Poll until `n` backends wait for `locker`'s lock on pgqueue.runs (asked on another
    connection, in autocommit: a transaction sees one snapshot of pg_stat_activity)."""
    deadline = asyncio.get_running_loop().time() + 10
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as watcher:
        while True:
            cur = await watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (locker.info.backend_pid,),
            )
            row = await cur.fetchone()
            if row is not None and row[0] >= n:
                return
            assert asyncio.get_running_loop().time() < deadline, "no insert waited for the lock"
            await asyncio.sleep(0.01)


def test_calls_during_a_lone_write_share_the_next_commit(dsn: str) -> None:
    """A lone enqueue_async writes its own run. Calls made while it is written (pool_size=1:
    no place for another writer) wait, and are written together once it is done."""
    app = pgqueue.App(dsn, pool_size=1)

    @app.task(name="echo")
    async def echo(x: int) -> int:
        return x

    async def main() -> list[pgqueue.RunHandle]:
        try:
            locker = await psycopg.AsyncConnection.connect(dsn)
            async with locker:
                await locker.execute("LOCK TABLE pgqueue.runs IN SHARE MODE")
                lone = asyncio.ensure_future(echo.enqueue_async(0))
                await blocked_inserts(dsn, locker, 1)
                others = asyncio.gather(*(echo.enqueue_async(i) for i in range(1, 11)))
                await asyncio.sleep(0)  # each call of the gather has started
                await locker.commit()
                return [await asyncio.wait_for(lone, 10), *await asyncio.wait_for(others, 10)]
        finally:
            await app.aclose()

    try:
        handles = asyncio.run(main())
        runs = [app.get_run(h.id) for h in handles]
    finally:
        app.close()
    assert [r.args for r in runs] == [[i] for i in range(11)]
    assert runs[0].created_at not in {r.created_at for r in runs[1:]}
    assert len({r.created_at for r in runs[1:]}) == 1


def test_cancelling_a_lone_enqueue_async_cancels_its_insert(dsn: str) -> None:
    """A lone call writes its run in its own task: cancelled while the insert waits, the
    insert is cancelled in the server too (as with conn=), and the connection serves the
    next call."""
    app = pgqueue.App(dsn, pool_size=1)

    @app.task(name="echo")
    async def echo(x: int) -> int:
        return x

    async def main() -> pgqueue.RunHandle:
        try:
            locker = await psycopg.AsyncConnection.connect(dsn)
            async with locker:
                await locker.execute("LOCK TABLE pgqueue.runs IN SHARE MODE")
                lone = asyncio.ensure_future(echo.enqueue_async(0))
                await blocked_inserts(dsn, locker, 1)
                lone.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await lone
                await locker.commit()
            return await echo.enqueue_async(1)
        finally:
            await app.aclose()

    try:
        handle = asyncio.run(main())
        assert app.get_run(handle.id).args == [1]
    finally:
        app.close()
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE task = 'echo'") == 1


def test_a_rejected_run_fails_only_its_own_enqueue(dsn: str) -> None:
    """The server refuses one run of a shared statement: its caller gets the error, the
    other callers' runs are written."""
    app = pgqueue.App(dsn, pool_size=1)

    @app.task(name="echo")
    async def echo(x: int) -> int:
        return x

    bad = dataclasses.replace(
        echo.make_row((0,), {}, pgqueue.enqueue.options.EnqueueOptions()), max_attempts=0
    )

    async def main() -> list[Any]:
        try:
            calls = [echo.enqueue_async(i) for i in range(1, 6)]
            calls.insert(2, app.insert_runs_async([bad]))
            return list(await asyncio.gather(*calls, return_exceptions=True))
        finally:
            await app.aclose()

    try:
        results = asyncio.run(main())
        assert isinstance(results[2], psycopg.errors.CheckViolation)
        good = [r for i, r in enumerate(results) if i != 2]
        assert [app.get_run(h.id).args for h in good] == [[i] for i in range(1, 6)]
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE task = 'echo'") == 5
    finally:
        app.close()
