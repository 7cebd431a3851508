"""The asyncio half of App: a connection pool opened lazily on the running event loop, and
async twins of the calls an asyncio program makes. Each twin runs the same SQL file and the
same parameter and result logic as its sync call (pgqueue._inserts, runs.found_run); only
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

from pgqueue import _inserts, _sql, db
from pgqueue.errors import ConfigError
from pgqueue.runs import Run, RunHandle, found_run
from pgqueue.tasks import RunRow

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
            if owner is loop and self._apool_guard is not None:
                self._apool_guard.cancel()  # closes the pool it replaces
            self._apool = AsyncConnectionPool(
                app.dsn,
                min_size=1,
                max_size=app.pool_size,
                kwargs={"autocommit": True},
                timeout=10,
                reconnect_timeout=db.RECONNECT_TIMEOUT,
                open=False,
                name="pgqueue-async",
            )
            self._apool_loop = weakref.ref(loop)
            self._apool_pid = os.getpid()
            self._apool_dsn = app.dsn
            self._apool_opening = asyncio.ensure_future(_open(self._apool, app.dsn))
            self._apool_guard = asyncio.ensure_future(_close_with_loop(self._apool))
        assert self._apool_opening is not None
        pool = self._apool
        try:
            await asyncio.shield(self._apool_opening)
        except ConfigError:
            if self._apool is pool:
                self._apool = None  # the next call tries again
            raise
        return pool

    @contextlib.asynccontextmanager
    async def async_connection(self, conn: AsyncConn | None = None) -> AsyncIterator[AsyncConn]:
        """The caller's AsyncConnection if given, else one from the App's async pool."""
        if conn is not None:
            with db.translate_errors():
                yield conn
            return
        pool = await self._get_async_pool()
        try:
            async with pool.connection() as pooled:
                with db.translate_errors():
                    yield pooled
        except PoolTimeout:
            raise ConfigError(
                f"no database connection within 10s ({db.redact(self._app().dsn)}): "
                "is the server up?"
            ) from None

    async def aclose(self) -> None:
        """Close the async pool (e.g. in a FastAPI lifespan's shutdown)."""
        pool, loop, guard = self._apool, self._apool_loop, self._apool_guard
        self._apool = self._apool_guard = None
        if guard is not None:
            guard.cancel()
        if pool is not None and loop is not None and loop() is asyncio.get_running_loop():
            await pool.close()

    async def insert_runs_async(
        self, rows: Sequence[RunRow], *, conn: AsyncConn | None = None
    ) -> list[RunHandle]:
        """The async twin of App.insert_runs: one statement for the whole batch."""
        if not rows:
            return []
        op = _inserts.Insert(self._app(), rows)
        async with self.async_connection(conn) as c:
            found = await (await c.execute(op.query, op.params)).fetchone()
            lookup = op.lookup(found)
            existing = await (await c.execute(*lookup)).fetchall() if lookup else []
        return op.handles(found, existing)

    async def get_run_async(self, run_id: int, *, conn: AsyncConn | None = None) -> Run:
        async with self.async_connection(conn) as c, c.cursor(row_factory=dict_row) as cur:
            await cur.execute(_sql.query("get_run"), {"id": run_id})
            row = await cur.fetchone()
        return found_run(run_id, row)


async def _open(pool: AsyncConnectionPool[AsyncConn], dsn: str) -> None:
    try:
        first = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    except psycopg.OperationalError as exc:
        raise ConfigError(
            f"cannot connect to PostgreSQL ({db.redact(dsn)}): {db.first_line(exc)}. "
            "Check the DSN and that the server is running"
        ) from None
    await first.close()  # failed fast, in one line, on a bad DSN or server
    await pool.open(wait=False)


async def _close_with_loop(pool: AsyncConnectionPool[AsyncConn]) -> None:
    """Close the pool when its event loop cancels every task at its end (asyncio.run).
    Without it, a pool connection attempt that the cancellation interrupts can keep the
    pool's workers, and so the loop's shutdown, waiting forever."""
    try:
        await asyncio.get_running_loop().create_future()
    except asyncio.CancelledError:
        await pool.close(timeout=2)
        raise
