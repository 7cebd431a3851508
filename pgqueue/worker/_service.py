"""The lifecycle every background duty of a worker shares: tick, sleep, survive outages."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, TypeAlias

from psycopg_pool import AsyncConnectionPool

from pgqueue import _faults

log = logging.getLogger("pgqueue.worker")

# Errors that mean "the database is unreachable right now": retry, never crash. A standby
# (read_only_sql_transaction) is one: during a failover it is promoted, or the DSN's
# other host becomes reachable (pgqueue._faults.standby).
DB_ERRORS = _faults.UNAVAILABLE

# The worker's connection pool, which every duty on the event loop shares.
Pool: TypeAlias = AsyncConnectionPool[Any]


def outage_delay(
    what: str, exc: BaseException, failures: int, base: float = 0.1, cap: float = 5.0
) -> float:
    """The one backoff for database errors: log what went wrong (a lost connection, a
    protocol error, an unavailable database: pgqueue._faults.describe) and return how
    long to wait before try `failures` + 1.

    A first failure that lost its connection is retried at once: the pools hand out live
    connections only (pgqueue._pool), opening fresh ones if need be, so a killed
    connection costs one retry, not an outage. Backoff, doubling from `base` up to `cap`,
    starts only when the fresh connection fails too."""
    if failures <= 1 and _faults.lost(exc):
        log.info("%s: %s; retrying at once on a fresh connection", what, _faults.describe(exc))
        return 0.0
    delay: float = min(cap, base * 2.0**failures)
    log.warning("%s: %s; retrying in %.1fs", what, _faults.describe(exc), delay)
    return delay


class Service:
    """A periodic duty: `tick()` does one round and returns seconds until the next one.
    A database outage is logged and retried with backoff; a bug is logged too, since one
    duty failing must not take the worker's other runs down with it. Each duty is given
    only what it uses (the pool, its queues, its interval, a callback), never the Worker."""

    name = "service"

    async def tick(self) -> float:
        raise NotImplementedError

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                delay = await self.tick()
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
