"""Moves scheduled runs (delayed, backing off, sleeping) to `queued` when they are due."""

from __future__ import annotations

from datetime import datetime

from pgqueue import _sql
from pgqueue.worker._service import Service

BATCH = 1000


class Stager(Service):
    name = "stager"

    async def stage(self) -> tuple[int, datetime | None]:
        """One pass over the served queues: runs staged, and the earliest next due time."""
        total = 0
        next_due: datetime | None = None
        async with self.worker.pool.connection() as conn:
            for queue in self.worker.queues:
                while True:
                    cur = await conn.execute(
                        _sql.query("stage_due"), {"queue": queue, "limit": BATCH}
                    )
                    row = await cur.fetchone()
                    assert row is not None
                    staged, _, due = row
                    total += staged
                    if staged < BATCH:
                        break
                if due is not None and (next_due is None or due < next_due):
                    next_due = due
        return total, next_due

    async def tick(self) -> float:
        staged, next_due = await self.stage()
        if staged:
            self.worker.wake()
        interval = self.worker.stage_interval
        if next_due is None:
            return interval
        # Sleep until the next run is due (measured on the database clock), but never
        # longer than the interval, so runs scheduled meanwhile are seen too.
        async with self.worker.pool.connection() as conn:
            cur = await conn.execute("SELECT extract(epoch FROM %s - now())::float8", (next_due,))
            row = await cur.fetchone()
        wait = float(row[0]) if row else interval
        return max(0.01, min(interval, wait))
