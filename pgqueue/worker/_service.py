"""The lifecycle every background duty of a worker shares: tick, sleep, survive outages."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from abc import ABC, abstractmethod
from typing import Any, TypeAlias

from psycopg_pool import AsyncConnectionPool

from pgqueue.db import faults as _faults

log = logging.getLogger("pgqueue.worker")

# Errors that mean "the database is unreachable right now": retry, never crash. A standby
# (read_only_sql_transaction) is one: during a failover it is promoted, or the DSN's
# other host becomes reachable (pgqueue.db.faults.standby).
DB_ERRORS = _faults.UNAVAILABLE

# The worker's connection pool, which every duty on the event loop shares.
Pool: TypeAlias = AsyncConnectionPool[Any]


class Outage:
    """One worker's view of its database: reachable or not. Every part of a worker that
    owns a connection (the claim loop, the completer, the listener, the lease keeper,
    each maintenance duty) retries on its own; this is what they share, so that an
    outage costs the log one WARNING when it starts and one INFO when it ends, per
    worker, whatever the number of parts. Each retry is logged at DEBUG. Thread-safe:
    the lease keeper reports from its own thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.down_since: float | None = None  # monotonic, while the database is down

    def failed(self, what: str, exc: BaseException, delay: float) -> None:
        """`what` failed with `exc` and retries in `delay` seconds."""
        with self._lock:
            first = self.down_since is None
            if first:
                self.down_since = time.monotonic()
        if first:
            log.warning(
                "database down for this worker (%s: %s); its parts retry until it is back",
                what,
                _faults.describe(exc),
            )
        log.debug("%s: %s; retrying in %.1fs", what, _faults.describe(exc), delay)

    def succeeded(self, what: str) -> None:
        """`what` reached the database: an outage, if one was logged, is over."""
        if self.down_since is None:  # the common case, without the lock
            return
        with self._lock:
            since, self.down_since = self.down_since, None
        if since is not None:
            log.info(
                "database back after %.1fs (%s reached it first)", time.monotonic() - since, what
            )


# The Outage of the worker whose parts run in this context: Worker.run_async sets it, the
# tasks it starts inherit it, and the lease keeper's thread (a thread starts with an empty
# context) adopts it. Parts run on their own report to a shared default.
_OUTAGE: contextvars.ContextVar[Outage] = contextvars.ContextVar("pgqueue_outage")
_DEFAULT = Outage()


def outage() -> Outage:
    """The Outage of the worker running in this context."""
    return _OUTAGE.get(_DEFAULT)


def use_outage(mine: Outage) -> None:
    """On a worker's start (and in its threads): the parts started from this context
    report to `mine`."""
    _OUTAGE.set(mine)


class _PoolRetries(logging.Filter):
    """psycopg_pool logs a WARNING for each failed connection attempt of a pool, which
    during an outage is one line per attempt per worker: for a worker's pool
    (connection.open_pool names it pgqueue-worker-...), those go at DEBUG, or nowhere
    unless psycopg.pool's logger is enabled for DEBUG; the worker's Outage says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not (
            record.levelno == logging.WARNING
            and isinstance(args, tuple)
            and args
            and isinstance(args[0], str)
            and args[0].startswith(WORKER_POOL_PREFIX)
        ):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


WORKER_POOL_PREFIX = "pgqueue-worker-"
_POOL_RETRIES = _PoolRetries()


def quiet_pool_retries() -> None:
    """Move psycopg_pool's connection retry warnings for worker pools to DEBUG (once per
    process; adding the same filter again does nothing)."""
    logging.getLogger("psycopg.pool").addFilter(_POOL_RETRIES)


def outage_delay(
    what: str, exc: BaseException, failures: int, base: float = 0.1, cap: float = 5.0
) -> float:
    """The one backoff for database errors: report what went wrong (a lost connection, a
    protocol error, an unavailable database: pgqueue.db.faults.describe) to the worker's
    Outage and return how long to wait before try `failures` + 1.

    A first failure that lost its connection is retried at once: the pools hand out live
    connections only (pgqueue.db.pool), opening fresh ones if need be, so a killed
    connection costs one retry, not an outage (and no line above DEBUG). Backoff,
    doubling from `base` up to `cap`, starts only when the fresh connection fails too,
    and so does the outage."""
    if failures <= 1 and _faults.lost(exc):
        log.debug("%s: %s; retrying at once on a fresh connection", what, _faults.describe(exc))
        return 0.0
    delay: float = min(cap, base * 2.0**failures)
    outage().failed(what, exc, delay)
    return delay


def reached(what: str, failures: int) -> None:
    """`what` succeeded after `failures` failed tries: tell the worker's Outage."""
    if failures:
        outage().succeeded(what)


class Service(ABC):
    """A periodic duty: `tick()` does one round and returns seconds until the next one.
    A database outage is logged and retried with backoff; a bug is logged too, since one
    duty failing must not take the worker's other runs down with it. Each duty is given
    only what it uses (the pool, its queues, its interval, a callback), never the Worker."""

    name = "service"

    @abstractmethod
    async def tick(self) -> float:
        """One round of the duty; the seconds until the next."""

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                delay = await self.tick()
                reached(self.name, failures)
                failures = 0
            except asyncio.CancelledError:
                raise
            except DB_ERRORS as exc:
                failures += 1
                delay = outage_delay(self.name, exc, failures, base=0.2)
            except Exception:
                failures += 1
                delay = min(5.0, 0.2 * 2**failures)
                log.exception("%s failed; retrying in %.1fs", self.name, delay)
            await self.pause(delay)

    async def pause(self, delay: float) -> None:
        """Between two ticks (a duty that can be woken early overrides it)."""
        await asyncio.sleep(delay)
