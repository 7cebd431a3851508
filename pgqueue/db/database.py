"""The database an App is bound to: where it is (the DSN, the pooler), what its payloads
may hold, and the App's connections to it: a sync pool per process and an async pool per
event loop, both opened at first use. Every part of pgqueue that talks to the database
for an App (enqueues, operations, waiters, progress, durable steps) takes this object."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgqueue.db import connect as db
from pgqueue.db import migrate
from pgqueue.db import payload as _json
from pgqueue.db import pool as _pool
from pgqueue.errors import ConfigError, OutOfRange

AsyncConn = psycopg.AsyncConnection[Any]

NOTIFY_ENV = "PGQUEUE_NOTIFY"

# Returns the connection of the caller's open transaction, or None (see
# Database.caller_connection).
ConnectionProvider = Callable[[], "psycopg.Connection[Any] | None"]
# Returns the DSN to use now (see Database.dsn_source).
DsnSource = Callable[[], str]


class Closable(Protocol):
    def close(self) -> None: ...


class Database:
    """Settings and connections; App(...)'s arguments of the same names.

    `dsn`: argument > `dsn_source` (asked at each use) > PGQUEUE_DSN > error, resolved at
    first use so that a module can create its App at import time and the CLI's --dsn can
    still apply. `pooler`, `notify`, `max_payload_bytes`, `max_json_depth`, `pool_size`:
    see App. The async pool belongs to one event loop (and one process): a call from
    another loop, as in a test that runs several loops, opens a pool there."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        notify: bool | None = None,
        pooler: str | None = None,
        max_payload_bytes: int = _json.DEFAULT_MAX_PAYLOAD_BYTES,
        max_json_depth: int = _json.DEFAULT_MAX_JSON_DEPTH,
        pool_size: int = 4,
    ) -> None:
        self._dsn = db.check_dsn(dsn) if dsn else None
        self.pooler = db.resolve_pooler(pooler)
        if notify is None:
            default = "off" if self.pooler == "transaction" else "on"
            notify = os.environ.get(NOTIFY_ENV, default).lower() not in ("off", "0", "false", "no")
        self.notify = notify
        self.max_payload_bytes = max_payload_bytes
        if max_json_depth < 1:
            raise OutOfRange(f"max_json_depth must be 1 or more, not {max_json_depth}")
        # arguments, results and event payloads nested deeper are refused
        self.max_json_depth = max_json_depth
        self.pool_size = pool_size
        # Without a DSN of its own, the App asks this at each use and follows a framework's
        # settings (Django's test runner switches DATABASES after setup); the pool reopens
        # on a new answer.
        self.dsn_source: DsnSource | None = None
        self.connection_provider: ConnectionProvider | None = None
        # The shared listener of this database's waiters in this process
        # (pgqueue.runs.waiters.shared makes it, under `lock`; close() closes it).
        self.waiters: Closable | None = None
        self.lock = threading.Lock()
        self._pool: _pool.CheckedPool | None = None
        self._pool_pid = 0
        self._pool_dsn = ""
        self._apool: AsyncConnectionPool[AsyncConn] | None = None
        self._apool_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._apool_pid = 0
        self._apool_dsn = ""
        self._apool_opening: asyncio.Task[None] | None = None
        self._apool_guard: asyncio.Task[None] | None = None

    # -- configuration ----------------------------------------------------------------

    @property
    def dsn(self) -> str:
        if self._dsn is not None:
            return self._dsn
        if self.dsn_source is not None:
            return self.dsn_source()
        self._dsn = db.resolve_dsn(None)
        return self._dsn

    @property
    def has_own_dsn(self) -> bool:
        """A DSN given (App(dsn=...), configure) or resolved from $PGQUEUE_DSN."""
        return self._dsn is not None

    @property
    def listens(self) -> bool:
        """Whether this app's workers and waiters LISTEN (else they poll): with
        notifications on, and never through a pooler in transaction mode."""
        return self.notify and self.pooler != "transaction"

    def configure(
        self, *, dsn: str | None = None, notify: bool | None = None, pooler: str | None = None
    ) -> None:
        """Override settings after import (the CLI's --dsn, --pooler). Closes an open
        pool. A pooler given here sets notify to its default unless notify is given too."""
        if dsn is not None:
            self.close()
            self._dsn = db.check_dsn(dsn)
        if pooler is not None:
            self.close()
            self.pooler = db.resolve_pooler(pooler)
            if notify is None:
                notify = self.pooler != "transaction"
        if notify is not None:
            self.notify = notify

    def migrate(self) -> None:
        """Create or update the pgqueue schema (same as `pgqueue migrate`)."""
        migrate.upgrade(self.dsn)

    def check_schema(self) -> None:
        """Raise NotMigrated unless the database schema matches this pgqueue version."""
        with self.connection() as conn:
            migrate.check(conn)

    # -- sync connections -------------------------------------------------------------

    @property
    def pool(self) -> _pool.CheckedPool | None:
        """The sync pool if one is open (it opens at the first connection())."""
        return self._pool

    def _get_pool(self) -> _pool.CheckedPool:
        dsn = self.dsn
        with self.lock:
            if self._pool is None or self._pool_pid != os.getpid() or self._pool_dsn != dsn:
                if self._pool is not None and self._pool_pid == os.getpid():
                    self._pool.close()  # the DSN changed: its connections go with it
                self._pool = _pool.open_pool(dsn, self.pool_size, self.pooler)
                self._pool_pid = os.getpid()
                self._pool_dsn = dsn
            return self._pool

    @contextlib.contextmanager
    def connection(
        self, conn: psycopg.Connection[Any] | None = None
    ) -> Iterator[psycopg.Connection[Any]]:
        """The caller's connection if given, else one from the App's pool (autocommit)."""
        if conn is not None:
            with db.translate_errors(conn):
                yield conn
            return
        try:
            pool = self._get_pool()
            pooled = pool.getconn()
        except PoolTimeout:
            raise db.pool_timeout(self.dsn) from None
        # the pool's connection() without its context managers (see pgqueue.db.pool)
        try:
            yield pooled
        except BaseException as exc:
            _pool.settle(pooled, failed=True)
            friendly = db.translated(exc, pooled)
            if friendly is not None:
                raise friendly from None
            if isinstance(exc, PoolTimeout):  # the block's own pool wait
                raise db.pool_timeout(self.dsn) from None
            raise
        else:
            _pool.settle(pooled, failed=False)
        finally:
            pool.putconn(pooled)

    def caller_connection(
        self, conn: psycopg.Connection[Any] | None = None
    ) -> psycopg.Connection[Any] | None:
        """`conn`, else the connection of the caller's open transaction as reported by
        `connection_provider` (the Django and Flask integrations install one), else None:
        enqueues and events join that transaction without conn=."""
        if conn is None and self.connection_provider is not None:
            return self.connection_provider()
        return conn

    def close(self) -> None:
        """Close the pools (sync and async, see close_async_pool) and the waiters' shared
        connection; each opens again at next use."""
        self.close_async_pool()
        waiters, self.waiters = self.waiters, None
        if waiters is not None:
            waiters.close()
        with self.lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    # -- async connections ------------------------------------------------------------

    async def _get_async_pool(self) -> AsyncConnectionPool[AsyncConn]:
        loop = asyncio.get_running_loop()
        owner = self._apool_loop() if self._apool_loop is not None else None
        dsn = self.dsn
        if (
            self._apool is None
            or owner is not loop
            or self._apool_pid != os.getpid()
            or self._apool_dsn != dsn  # configure(dsn=...) since
        ):
            # No await between the check and the assignment: concurrent callers on this
            # loop all see the one pool, and all wait for the one opening.
            if self._apool_guard is not None:
                _stop(self._apool_guard, owner)  # closes the pool it replaces
            self._apool = _pool.AsyncCheckedPool(
                dsn,  # the session's own search_path, as the sync pool's (db.SEARCH_PATH)
                name="pgqueue-async",
                **db.app_pool_options(self.pool_size, self.pooler),
            )
            self._apool_loop = weakref.ref(loop)
            self._apool_pid = os.getpid()
            self._apool_dsn = dsn
            self._apool_opening = asyncio.ensure_future(_open(self._apool, dsn, self.pooler))
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
            raise db.pool_timeout(self.dsn) from None
        # the pool's connection() without its context managers (see pgqueue.db.pool)
        try:
            yield pooled
        except BaseException as exc:
            await _pool.asettle(pooled, failed=True)
            friendly = db.translated(exc, pooled)
            if friendly is not None:
                raise friendly from None
            if isinstance(exc, PoolTimeout):  # the block's own pool wait
                raise db.pool_timeout(self.dsn) from None
            raise
        else:
            await _pool.asettle(pooled, failed=False)
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
        """Close the async pool from synchronous code (close() calls it), whichever
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
