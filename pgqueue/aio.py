"""The asyncio half of App: a connection pool opened lazily on the running event loop, and
async twins of the calls an asyncio program makes. Each twin runs the same SQL file and the
same parameter and result logic as its sync call (pgqueue.enqueue.inserts, runs.found_run); only
the awaiting differs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgqueue.db import connect as db
from pgqueue.db import sql as _sql
from pgqueue.db.pool import AsyncCheckedPool, asettle
from pgqueue.enqueue import batches
from pgqueue.enqueue import inserts as _inserts
from pgqueue.errors import ConfigError, UserError
from pgqueue.runs.handle import Run, RunHandle, check_run_id, found_run
from pgqueue.tasks.task import RunBatch, RunRow

if TYPE_CHECKING:
    from pgqueue.app import App

AsyncConn = psycopg.AsyncConnection[Any]


class AsyncApp:
    """Mixed into App. The pool belongs to one event loop (and one process): a call from
    another loop, as in a test that runs several loops, opens a pool there."""

    _apool: AsyncConnectionPool[AsyncConn] | None = None
    _apool_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
    _apool_pid: int = 0
    _apool_dsn: str = ""
    _apool_opening: asyncio.Task[None] | None = None
    _apool_guard: asyncio.Task[None] | None = None
    _group_commit: GroupCommit | None = None

    def _app(self) -> App:
        return cast("App", self)

    async def _get_async_pool(self) -> AsyncConnectionPool[AsyncConn]:
        loop = asyncio.get_running_loop()
        app = self._app()
        owner = self._apool_loop() if self._apool_loop is not None else None
        if (
            self._apool is None
            or owner is not loop
            or self._apool_pid != os.getpid()
            or self._apool_dsn != app.dsn  # app.configure(dsn=...) since
        ):
            # No await between the check and the assignment: concurrent callers on this
            # loop all see the one pool, and all wait for the one opening.
            if self._apool_guard is not None:
                _stop(self._apool_guard, owner)  # closes the pool it replaces
            self._apool = AsyncCheckedPool(
                app.dsn,  # the session's own search_path, as the sync pool's (db.SEARCH_PATH)
                name="pgqueue-async",
                **db.app_pool_options(app.pool_size, app.pooler),
            )
            self._apool_loop = weakref.ref(loop)
            self._apool_pid = os.getpid()
            self._apool_dsn = app.dsn
            self._apool_opening = asyncio.ensure_future(_open(self._apool, app.dsn, app.pooler))
            self._apool_guard = asyncio.ensure_future(_close_with_loop(self._apool))
        opening = self._apool_opening
        assert opening is not None
        pool = self._apool
        try:
            if opening.done():  # open: no shield (a future and two callbacks per call)
                opening.result()
            else:
                await asyncio.shield(opening)
        except ConfigError:
            if self._apool is pool:
                self._apool = None  # the next call tries again
            raise
        return pool

    @contextlib.asynccontextmanager
    async def async_connection(self, conn: AsyncConn | None = None) -> AsyncIterator[AsyncConn]:
        """The caller's AsyncConnection if given, else one from the App's async pool."""
        if conn is not None:
            with db.translate_errors(conn):
                yield conn
            return
        pool = await self._get_async_pool()
        try:
            pooled = await pool.getconn()
        except PoolTimeout:
            raise db.pool_timeout(self._app().dsn) from None
        # the pool's connection() without its context managers (see pgqueue.db.pool)
        try:
            yield pooled
        except BaseException as exc:
            await asettle(pooled, failed=True)
            friendly = db.translated(exc, pooled)
            if friendly is not None:
                raise friendly from None
            if isinstance(exc, PoolTimeout):  # the block's own pool wait
                raise db.pool_timeout(self._app().dsn) from None
            raise
        else:
            await asettle(pooled, failed=False)
        finally:
            await pool.putconn(pooled)

    async def aclose(self) -> None:
        """Close the async pool (e.g. in a FastAPI lifespan's shutdown)."""
        pool, loop, guard = self._apool, self._apool_loop, self._apool_guard
        self._apool = self._apool_guard = None
        if guard is not None:
            guard.cancel()
        if pool is not None and loop is not None and loop() is asyncio.get_running_loop():
            await pool.close()

    def close_async_pool(self, timeout: float = 5.0) -> None:
        """Close the async pool from synchronous code (App.close calls it), whichever
        thread runs its event loop: on a loop running in another thread (an ASGI server's,
        a test's background loop) or on one that is not running (kept between tests), it
        waits up to `timeout` for the connections to close. Called on the pool's own
        running loop, it can only schedule the close. It reopens at next use."""
        guard, ref = self._apool_guard, self._apool_loop
        self._apool = self._apool_guard = self._apool_opening = None
        loop = ref() if ref is not None else None
        if guard is None or loop is None or loop.is_closed() or guard.done():
            return
        if loop.is_running():
            if _running_loop() is loop:
                guard.cancel()
            else:
                asyncio.run_coroutine_threadsafe(_cancelled(guard), loop).result(timeout)
        elif _running_loop() is None:
            loop.run_until_complete(asyncio.wait_for(_cancelled(guard), timeout))
        else:
            guard.cancel()  # closes when its loop runs again

    async def insert_runs_async(
        self, rows: Sequence[RunRow], *, conn: AsyncConn | None = None
    ) -> list[RunHandle]:
        """The async twin of App.insert_runs: one statement for the whole batch. A single
        run without a connection of its own (enqueue_async) is written by the loop's
        GroupCommit, together with the other single runs enqueued meanwhile."""
        if not rows:
            return []
        app = self._app()
        if batches.active(app) is not None:
            raise UserError(
                "enqueue_async inside app.batch() would not join the batch: use enqueue() "
                "or enqueue_many() in the block"
            )
        if app.tracing is not None:
            with app.tracing.enqueue(rows) as traced:
                return traced(await self._insert_now(rows, conn, traced.headers))
        if conn is None and len(rows) == 1 and not isinstance(rows, RunBatch):
            loop = asyncio.get_running_loop()
            group = self._group_commit
            if group is None or group.loop is not loop:
                group = self._group_commit = GroupCommit(self, loop)
            return [await group.insert(rows[0])]
        return await self._insert_now(rows, conn)

    async def _insert_now(
        self, rows: Sequence[RunRow], conn: AsyncConn | None, headers: str | None = None
    ) -> list[RunHandle]:
        """One statement now; a traced enqueue takes this path (each run's own headers),
        not GroupCommit's shared one."""
        op = _inserts.Insert(self._app(), rows, headers)
        async with self.async_connection(conn) as c:
            found = op.found(await (await c.execute(op.query, op.params)).fetchone())
            lookup = op.lookup(found)
            existing = await (await c.execute(*lookup)).fetchall() if lookup else []
        return op.handles(found, existing)

    async def get_run_async(self, run_id: int, *, conn: AsyncConn | None = None) -> Run:
        async with self.async_connection(conn) as c, c.cursor(row_factory=dict_row) as cur:
            await cur.execute(_sql.query("get_run"), {"id": check_run_id(run_id)})
            row = await cur.fetchone()
        return found_run(run_id, row)


async def _open(pool: AsyncConnectionPool[AsyncConn], dsn: str, pooler: str | None) -> None:
    first = await db.aconnect(dsn, pooler=pooler, pin=False)
    await first.close()  # failed fast, in one line, on a bad DSN or server
    try:
        # with its first connection ready (see pgqueue.db.pool.open_pool)
        await pool.open(wait=True, timeout=db.POOL_TIMEOUT)
    except PoolTimeout:
        raise db.pool_timeout(dsn) from None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _stop(guard: asyncio.Task[None], loop: asyncio.AbstractEventLoop | None) -> None:
    """Cancel a pool's guard (which closes the pool) from any thread without waiting."""
    if guard.done() or loop is None or loop.is_closed():
        return
    if loop.is_running() and _running_loop() is not loop:
        loop.call_soon_threadsafe(guard.cancel)
    else:
        guard.cancel()


async def _cancelled(guard: asyncio.Task[None]) -> None:
    """Cancel the guard and wait until it has closed its pool."""
    guard.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await guard


async def _close_with_loop(pool: AsyncConnectionPool[AsyncConn]) -> None:
    """Close the pool when its event loop cancels every task at its end (asyncio.run).
    Without it, a pool connection attempt that the cancellation interrupts can keep the
    pool's workers, and so the loop's shutdown, waiting forever."""
    try:
        await asyncio.get_running_loop().create_future()
    except asyncio.CancelledError:
        await pool.close(timeout=2)
        raise


class GroupCommit:
    """Single-run enqueues of one event loop, without a connection of their own, written
    together (client-side group commit). A lone call, with no other run waiting or being
    written, is written by its caller's own task once the loop's current pass is over, if
    no other call came in that pass. Otherwise a flusher takes every run waiting, inserts
    them with one statement and one commit, and hands each caller its handle. Up to
    `pool_size` writers (the lone caller, flushers) run at once, and calls that arrive
    while they are busy share the next commit. A task that enqueues its follow-up (a
    chain, a fan-out) then pays a share of one commit instead of a whole one: the tasks
    one claim started enqueue in the same pass of the loop.

    Each caller's run is committed when its await returns. A caller cancelled while a
    flusher writes its run has it written all the same; a lone caller cancelled while it
    writes its own run cancels that write, as an enqueue on its own connection (conn=)
    would: it may or may not have been committed. One run that the server rejects (a
    DataError, an IntegrityError...) fails its own call only: the batch is written again
    one run at a time. A lost connection fails the whole batch."""

    def __init__(self, app: AsyncApp, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.loop = loop
        self.waiting: list[tuple[RunRow, asyncio.Future[RunHandle]]] = []
        self.flushers: set[asyncio.Task[None]] = set()
        self.alone = 0  # lone callers writing their own run (0 or 1)
        self.gathering = False  # the lone caller waits for the loop's pass to end

    async def insert(self, row: RunRow) -> RunHandle:
        if not self.waiting and not self.flushers and not self.alone:
            # Written by this task: no flusher task and no future to hand the handle
            # over (bench/RESULTS.md, "Single enqueue"), unless other calls came in the
            # same pass of the loop (the tasks one claim started, each enqueuing its
            # follow-up): then a flusher writes them all with one commit.
            self.alone = 1
            self.gathering = True
            try:
                await asyncio.sleep(0)
                self.gathering = False
                if not self.waiting:
                    return (await self.app._insert_now([row], None))[0]
                mine: asyncio.Future[RunHandle] = self.loop.create_future()
                self.waiting.insert(0, (row, mine))
            finally:
                self.gathering = False
                self.alone = 0
                self._start()  # the calls that came meanwhile, with this one's if they did
            return await mine
        future: asyncio.Future[RunHandle] = self.loop.create_future()
        self.waiting.append((row, future))
        if not self.gathering:  # (a gathering lone caller starts the flusher)
            self._start()
        return await future

    def _start(self) -> None:
        """A flusher for the runs waiting, if a writer's place is free."""
        if self.waiting and len(self.flushers) + self.alone < self.app._app().pool_size:
            task = self.loop.create_task(self._flush())
            self.flushers.add(task)
            task.add_done_callback(self.flushers.discard)

    async def _flush(self) -> None:
        while self.waiting:
            batch, self.waiting = self.waiting, []
            try:
                await self._write(batch)
            except BaseException as exc:  # cancelled with the loop: so are the callers
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                raise

    async def _write(self, batch: list[tuple[RunRow, asyncio.Future[RunHandle]]]) -> None:
        try:
            handles = await self.app._insert_now([row for row, _ in batch], None)
        except (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError) as exc:
            if len(batch) == 1:
                _settle(batch[0][1], exc)
            else:
                for one in batch:  # whose run was it? each alone
                    await self._write([one])
            return
        except Exception as exc:
            for _, future in batch:
                _settle(future, exc)
            return
        for (_, future), handle in zip(batch, handles, strict=True):
            _settle(future, handle)


def _settle(future: asyncio.Future[RunHandle], value: RunHandle | Exception) -> None:
    if future.done():  # the caller was cancelled; its run is written all the same
        return
    if isinstance(value, Exception):
        future.set_exception(value)
    else:
        future.set_result(value)
