"""Which served queues have cluster-wide limits (concurrency, group_concurrency): read
every few seconds, and at once on NOTIFY pgqueue_config (notifications.Listener)."""

from __future__ import annotations

from pgqueue import _sql
from pgqueue.worker._service import Pool, Service


class QueueLimits(Service):
    """Keeps `limited` (the queues with limits) up to date; the producer and the
    executor read it."""

    name = "queue limits"
    interval = 5.0

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.limited: set[str] = set()

    async def refresh(self) -> None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_sql.query("queue_limits"))
            self.limited = {row[0] for row in await cur.fetchall()}

    async def tick(self) -> float:
        await self.refresh()
        return self.interval
