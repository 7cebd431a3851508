"""Priority aging: every AGING_PERIOD seconds, the queued runs of the worker's queues
that have a `priority_aging` move one priority step up per interval they have waited
(sql/age_priorities.sql; docs/flow_control.md, Priority aging). Every worker runs one;
one at a time does the pass (an advisory lock), the others skip it. The claim does not
change: aging writes `priority`, which the claim reads from its index as always."""

from __future__ import annotations

import logging

from pgqueue.db import sql as _sql
from pgqueue.worker._service import Pool, Service

log = logging.getLogger("pgqueue.worker")

# seconds between two passes: part of the bound on a run's wait (docs/flow_control.md)
AGING_PERIOD = 1.0
BATCH = 1000  # runs a statement moves at most: the claims skip those while it writes them


class PriorityAging(Service):
    name = "priority aging"

    def __init__(self, pool: Pool, queues: list[str], period: float = AGING_PERIOD) -> None:
        self.pool = pool
        self.queues = queues
        self.period = period

    async def tick(self) -> float:
        moved = BATCH
        async with self.pool.connection() as conn:
            while moved >= BATCH:
                cur = await conn.execute(
                    _sql.query("age_priorities"), {"queues": self.queues, "batch": BATCH}
                )
                moved = cur.rowcount
                if moved > 0:
                    log.debug("priority aging moved %d runs", moved)
        return self.period
