"""Which served queues have cluster-wide limits (concurrency, group_concurrency, rate
limits, ordered, a group backoff in force), and which of them a rate limit or a backoff
holds back: read every few seconds, and at once on NOTIFY pgqueue_config
(notifications.Listener; a backoff sends one)."""

from __future__ import annotations

from pgqueue.db import sql as _sql
from pgqueue.worker._service import Pool, Service


class QueueLimits(Service):
    """Keeps `limited` (the queues claimed by claim_limited), `wakes` (those a rate limit
    or a backoff holds back: a claim that got less than it asked asks when to claim
    again) and `rate_only` (claimed by claim_rated.sql) up to date; the producer and the
    executor read them."""

    name = "queue limits"
    interval = 5.0

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.limited: set[str] = set()
        self.wakes: set[str] = set()
        self.rate_only: set[str] = set()  # a queue-level rate limit and nothing else

    async def refresh(self) -> None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_sql.query("queue_limits"))
            rows = await cur.fetchall()
        self.limited = {name for name, limited, _, _ in rows if limited}
        self.wakes = {name for name, _, wakes, _ in rows if wakes}
        self.rate_only = {name for name, _, _, rate_only in rows if rate_only}

    async def tick(self) -> float:
        await self.refresh()
        return self.interval
