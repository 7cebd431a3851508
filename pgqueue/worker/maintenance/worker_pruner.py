"""The worker pruner: deletes the rows of workers whose heartbeat stopped (their runs are
the rescuer's), every minute, from every worker."""

from __future__ import annotations

from pgqueue.db import sql as _sql
from pgqueue.worker._service import Pool, Service

INTERVAL = 60.0


class WorkerPruner(Service):
    name = "worker pruner"

    def __init__(self, pool: Pool, lease_seconds: float) -> None:
        self.pool = pool
        # a worker beats every third of its lease: four leases without a beat is gone
        self.stale = max(60.0, lease_seconds * 4)

    async def tick(self) -> float:
        async with self.pool.connection() as conn:
            await conn.execute(_sql.query("prune_workers"), {"stale_seconds": self.stale})
        return INTERVAL
