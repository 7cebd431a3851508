"""Reads the depth of the served queues from the database for the metrics gauges."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgqueue import _sql
from pgqueue.worker._service import Service

if TYPE_CHECKING:
    from pgqueue.metrics import WorkerMetrics
    from pgqueue.worker import Worker

INTERVAL = 5.0


class QueueDepth(Service):
    name = "queue depth"

    def __init__(self, worker: Worker, metrics: WorkerMetrics) -> None:
        super().__init__(worker)
        self.metrics = metrics

    async def tick(self) -> float:
        async with self.worker.pool.connection() as conn:
            cur = await conn.execute(_sql.query("queue_depth"), {"queues": self.worker.queues})
            self.metrics.set_depth(list(await cur.fetchall()))
        return INTERVAL
