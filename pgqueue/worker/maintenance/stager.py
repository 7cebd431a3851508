"""Moves runs whose time has come back to `queued`: scheduled runs (delayed, backing off,
sleeping) and waits whose deadline passed (a wait_for_event or ctx.call timeout, or a
delayed event's delivery: pgqueue.emit_event() brings its waiters' deadline forward to
it); now and then also waits whose child or event arrived without waking them (the
safety net behind the direct wake-ups).

It sleeps until the earliest due time of its queues (at most `interval`), and is woken
early by `nudge()` when a nearer one may have appeared: this worker wrote a sleep or a
backoff (the completer), or a NOTIFY on pgqueue_due said a delayed event was emitted. So
a durable sleep or a delayed event wakes its run within milliseconds of its due time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, LiteralString

import psycopg

from pgqueue.db import sql as _sql
from pgqueue.worker._service import Pool, Service

log = logging.getLogger("pgqueue.worker")

BATCH = 1000
SAFETY_NET_EVERY = 5  # ticks


class Stager(Service):
    """Stages the due runs of `queues` every `interval` seconds at most (sooner when the
    next one is due sooner); `staged()` is called when a round made some ready."""

    name = "stager"
    ticks = 0

    def __init__(
        self, pool: Pool, queues: list[str], interval: float, staged: Callable[[], None]
    ) -> None:
        self.pool = pool
        self.queues = queues
        self.interval = interval
        self.staged = staged
        self._nudged = asyncio.Event()

    def nudge(self) -> None:
        """On the loop: look at the due times now (a nearer one may have appeared)."""
        self._nudged.set()

    async def pause(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._nudged.wait(), delay)
        self._nudged.clear()

    async def stage(self) -> tuple[int, float | None]:
        """One pass over the served queues: runs made ready, and the seconds until
        another becomes due (None: none is scheduled).

        The statements answer that wait in seconds, computed and clamped by the database,
        never as a timestamp: a due time Python cannot hold must not stop the pass. A
        statement that fails on one queue's rows (a value error, or a constraint that a
        row stored before it breaks when staged) is logged and skips that queue only, so
        the delays, backoffs, sleeps and deadlines of the others still come due."""
        total = 0
        next_due: float | None = None
        self.ticks += 1
        queries = ["stage_due", "wake_expired_waits"]
        if self.ticks % SAFETY_NET_EVERY == 1:
            queries.append("wake_waiters")
        async with self.pool.connection() as conn:
            for queue in self.queues:
                for name in queries:
                    try:
                        staged, due = await self._drain(conn, _sql.query(name), queue)
                    except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as exc:
                        log.error(
                            "stager: %s failed for queue %r, skipped this round: %s",
                            name,
                            queue,
                            str(exc).splitlines()[0],
                        )
                        continue
                    total += staged
                    if due is not None and (next_due is None or due < next_due):
                        next_due = due
        return total, next_due

    async def _drain(self, conn: Any, query: LiteralString, queue: str) -> tuple[int, Any]:
        total = 0
        while True:
            cur = await conn.execute(query, {"queue": queue, "limit": BATCH})
            row = await cur.fetchone()
            assert row is not None
            total += row[0]
            if row[0] < BATCH:
                return total, (row[2] if len(row) > 2 else None)

    async def tick(self) -> float:
        staged, next_due = await self.stage()
        if staged:
            self.staged()
        if next_due is None:
            return self.interval
        # Sleep until the next run is due (on the database clock), but never longer
        # than the interval, so that runs scheduled meanwhile are seen too.
        return max(0.01, min(self.interval, next_due))
