"""The rescuer: takes back runs whose lease expired on some other (dead or cut-off)
worker, in every served queue (sql/rescue_expired.sql decides what each becomes)."""

from __future__ import annotations

import logging

from pgqueue import _sql
from pgqueue.worker._service import Pool, Service

log = logging.getLogger("pgqueue.worker")

BATCH = 100  # runs per statement


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
        return self.interval
