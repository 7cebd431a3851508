"""Leases: the keeper renews every lease this worker holds in one statement; the rescuer
takes back runs whose lease expired on some other (dead or cut-off) worker."""

from __future__ import annotations

import logging

from pgqueue import _sql
from pgqueue.worker._service import Service

log = logging.getLogger("pgqueue.worker")


class LeaseKeeper(Service):
    name = "lease keeper"

    async def tick(self) -> float:
        worker = self.worker
        held = [h for h in worker.held if not h.submitted and not h.lost]
        params = {
            "worker_id": worker.id,
            "lease_seconds": worker.lease_seconds,
            "id": [h.id for h in held],
            "lease_token": [h.lease_token for h in held],
        }
        async with worker.pool.connection() as conn:
            cur = await conn.execute(_sql.query("renew_leases"), params)
            renewed = {row[0] for row in await cur.fetchall()}
        for h in held:
            if h.id not in renewed and not h.submitted and not h.lost:
                worker.lose(h.id, "its lease was lost (expired, rescued or canceled)")
        return worker.lease_seconds / 3


class Rescuer(Service):
    name = "rescuer"

    async def tick(self) -> float:
        worker = self.worker
        async with worker.pool.connection() as conn:
            for queue in worker.queues:
                while True:
                    cur = await conn.execute(
                        _sql.query("rescue_expired"), {"queue": queue, "limit": 100}
                    )
                    rows = await cur.fetchall()
                    for run_id, state, _ in rows:
                        log.warning("run %s: lease expired, rescued -> %s", run_id, state)
                    if len(rows) < 100:
                        break
        return worker.rescue_interval


class WorkerPruner(Service):
    name = "worker pruner"

    async def tick(self) -> float:
        stale = max(60.0, self.worker.lease_seconds * 4)
        async with self.worker.pool.connection() as conn:
            await conn.execute(_sql.query("prune_workers"), {"stale_seconds": stale})
        return 60.0
