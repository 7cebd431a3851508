"""The metrics endpoint of a worker (`metrics_port`), and the duty that keeps its queue
depth gauges fresh from the database."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgqueue.db import sql as _sql
from pgqueue.worker._service import Pool, Service

if TYPE_CHECKING:
    from pgqueue.ops.metrics import WorkerMetrics
    from pgqueue.worker.probes import Probes

INTERVAL = 5.0


class QueueDepth(Service):
    name = "queue depth"

    def __init__(self, pool: Pool, queues: list[str], metrics: WorkerMetrics) -> None:
        self.pool = pool
        self.queues = queues
        self.metrics = metrics

    async def tick(self) -> float:
        async with self.pool.connection() as conn, conn.transaction():
            # a deep backlog prices the counts above jit_above_cost (sql/no_jit.sql)
            await conn.execute(_sql.query("no_jit"))
            cur = await conn.execute(_sql.query("queue_depth"), {"queues": self.queues})
            self.metrics.set_depth(list(await cur.fetchall()))
        return INTERVAL


def serve(port: int | None, probes: Probes | None = None) -> WorkerMetrics | None:
    """Serve the worker's metrics (and its probes) on `port` (None: no metrics): what its
    Transitions count into."""
    if port is None:
        return None
    from pgqueue.ops.metrics import WorkerMetrics

    metrics = WorkerMetrics()
    metrics.serve(port, probes=probes)
    return metrics


async def collect(pool: Pool, queues: list[str], metrics: WorkerMetrics) -> None:
    """Keep the queue depth gauges fresh; stop serving when the worker stops."""
    try:
        await QueueDepth(pool, queues, metrics).run()
    finally:
        metrics.close()
