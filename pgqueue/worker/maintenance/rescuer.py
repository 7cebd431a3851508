"""The rescuer: takes back runs whose lease expired on some other (dead or cut-off)
worker, in every served queue (sql/rescue_expired.sql decides what each becomes); and
settles batches whose last members finished in commits that each missed the others'
counts (sql/settle_open_batches.sql), the safety net behind the settlement at commit."""

from __future__ import annotations

import logging

from pgqueue.db import sql as _sql
from pgqueue.worker._service import Pool, Service

log = logging.getLogger("pgqueue.worker")

BATCH = 100  # runs (batches) per statement


class Rescuer(Service):
    name = "rescuer"

    def __init__(self, pool: Pool, queues: list[str], interval: float) -> None:
        self.pool = pool
        self.queues = queues
        self.interval = interval

    async def tick(self) -> float:
        async with self.pool.connection() as conn:
            for queue in self.queues:
                while True:
                    cur = await conn.execute(
                        _sql.query("rescue_expired"), {"queue": queue, "limit": BATCH}
                    )
                    rows = await cur.fetchall()
                    for run_id, state, _ in rows:
                        log.warning("run %s: lease expired, rescued -> %s", run_id, state)
                    if len(rows) < BATCH:
                        break
            while True:
                cur = await conn.execute(_sql.query("settle_open_batches"), {"limit": BATCH})
                settled = await cur.fetchall()
                for batch_id, callback in settled:
                    if callback is not None:
                        log.info(
                            "batch %s: settled by the sweep, callback run %s", batch_id, callback
                        )
                if len(settled) < BATCH:
                    break
        return self.interval
