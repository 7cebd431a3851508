"""The App's connection pools (pgqueue.db.database.Database opens them: one per process,
and an async one per event loop), and the pool classes every pgqueue pool is made of:
psycopg_pool's, except that a connection found dead while it sat idle
(pgqueue.db.faults.dead) is discarded and the next one taken, so that a server that killed
the idle connections costs no failed operation."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from pgqueue.db import connect as db
from pgqueue.db import faults as _faults

log = logging.getLogger(__name__)
IDLE = TransactionStatus.IDLE


class CheckedPool(ConnectionPool[psycopg.Connection[Any]]):
    """A ConnectionPool that never hands out a connection known to be dead."""

    def getconn(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            conn = super().getconn(max(0.0, deadline - time.monotonic()))
            if not _faults.dead(conn):
                return conn
            conn.close()  # the pool discards a closed connection and opens another
            self.putconn(conn)
            if time.monotonic() >= deadline:
                raise PoolTimeout("no live connection in time")


class AsyncCheckedPool(AsyncConnectionPool[psycopg.AsyncConnection[Any]]):
    """An AsyncConnectionPool that never hands out a connection known to be dead."""

    async def getconn(self, timeout: float | None = None) -> psycopg.AsyncConnection[Any]:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            conn = await super().getconn(max(0.0, deadline - time.monotonic()))
            if not _faults.dead(conn):
                return conn
            await conn.close()
            await self.putconn(conn)
            if time.monotonic() >= deadline:
                raise PoolTimeout("no live connection in time")


# Database.connection and Database.async_connection take their connection with getconn() and
# give it back with putconn(), without the pool's connection() context manager and the
# `with conn:` inside it, which a single enqueue paid in client CPU (bench/RESULTS.md,
# "Single enqueue"). What `with conn:` does on the way out is settle() and asettle();
# putconn() does the rest: it rolls back a transaction left open and discards a
# connection that is broken or was returned mid-operation.


def settle(conn: psycopg.Connection[Any], failed: bool) -> None:
    """End the transaction the block left open, as leaving `with conn:` does: commit it,
    or roll it back after an error (a rollback that fails is logged, and the block's own
    error is the one raised). The pools' connections are in autocommit: usually there is
    none, and this is one status read."""
    if conn.closed or conn.pgconn.transaction_status == IDLE:
        return
    if not failed:
        conn.commit()
        return
    try:
        conn.rollback()
    except Exception as exc:
        log.warning("error ignored in rollback on %s: %s", conn, exc)


async def asettle(conn: psycopg.AsyncConnection[Any], failed: bool) -> None:
    """settle() for an AsyncConnection."""
    if conn.closed or conn.pgconn.transaction_status == IDLE:
        return
    if not failed:
        await conn.commit()
        return
    try:
        await conn.rollback()
    except Exception as exc:
        log.warning("error ignored in rollback on %s: %s", conn, exc)


def open_pool(dsn: str, size: int, pooler: str | None = None) -> CheckedPool:
    """An open pool on `dsn`, after one connection has failed fast, in one line, on a bad
    DSN or server."""
    db.connect(dsn, pooler=pooler, pin=False).close()
    # the session's own search_path: these are the caller's connections too (db.SEARCH_PATH)
    pool = CheckedPool(dsn, name="pgqueue", **db.app_pool_options(size, pooler))
    # With its first connection ready: a request made while that is still being opened
    # grows the pool by one, and psycopg_pool hands out its connections in turn, so a
    # caller enqueueing one run at a time would then alternate between two backends for
    # good, about 70 us slower per call (bench/RESULTS.md).
    pool.open(wait=True, timeout=db.POOL_TIMEOUT)  # closes itself on timeout
    return pool
