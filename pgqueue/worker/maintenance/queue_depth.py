"""Reads the depth of the served queues from the database for the metrics gauges."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgqueue import _sql
from pgqueue.worker._service import Pool, Service

if TYPE_CHECKING:
    from pgqueue.metrics import WorkerMetrics

INTERVAL = 5.0


class QueueDepth(Service):
    name = "queue depth"

    def __init__(self, pool: Pool, queues: list[str], metrics: WorkerMetrics) -> None:
        self.pool = pool
        self.queues = queues
        self.metrics = metrics

    async def tick(self) -> float:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_sql.query("queue_depth"), {"queues": self.queues})
            self.metrics.set_depth(list(await cur.fetchall()))
        return INTERVAL
