"""The lifecycle every background duty of a worker shares: tick, sleep, survive outages."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import psycopg
from psycopg_pool import PoolTimeout

if TYPE_CHECKING:
    from pgqueue.worker import Worker

log = logging.getLogger("pgqueue.worker")

# Errors that mean "the database is unreachable right now": retry, never crash.
DB_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)


class Service:
    """A periodic duty: `tick()` does one round and returns seconds until the next one.
    A database outage is logged and retried with backoff; a bug is logged too, since one
    duty failing must not take the worker's other runs down with it."""

    name = "service"

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

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
                delay = min(5.0, 0.2 * 2**failures)
                log.warning(
                    "%s: database unavailable (%s); retrying in %.1fs",
                    self.name,
                    str(exc).strip().splitlines()[0] if str(exc) else exc,
                    delay,
                )
            except Exception:
                failures += 1
                delay = min(5.0, 0.2 * 2**failures)
                log.exception("%s failed; retrying in %.1fs", self.name, delay)
            await asyncio.sleep(delay)
