"""Which served queues have cluster-wide limits (concurrency, group_concurrency, rate
limits, ordered), and which of them rate limits: read every few seconds, and at once on
NOTIFY pgqueue_config (notifications.Listener)."""

from __future__ import annotations

from pgqueue.db import sql as _sql
from pgqueue.worker._service import Pool, Service


class QueueLimits(Service):
    """Keeps `limited` (the queues with limits), `rated` (those with a rate limit) and
    `rate_only` (claimed by claim_rated.sql) up to date; the producer and the executor
    read them."""

    name = "queue limits"
    interval = 5.0

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.limited: set[str] = set()
        self.rated: set[str] = set()
        self.rate_only: set[str] = set()  # a queue-level rate limit and nothing else

    async def refresh(self) -> None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_sql.query("queue_limits"))
            rows = await cur.fetchall()
        self.limited = {name for name, _, _ in rows}
        self.rated = {name for name, rated, _ in rows if rated}
        self.rate_only = {name for name, _, rate_only in rows if rate_only}

    async def tick(self) -> float:
        await self.refresh()
        return self.interval
