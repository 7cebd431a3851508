"""Deletes finished runs (their steps and errors cascade), events and audit entries past
their retention, then completed batches whose members and callback are gone, in batches of
Retention.batch rows, each batch its own short statement. Every worker runs one; SKIP
LOCKED lets them share the work without waiting."""

from __future__ import annotations

import logging
import random

from pgqueue.db import sql as _sql
from pgqueue.ops.retention import Retention, prune_batches_step, prune_step
from pgqueue.worker._service import Pool, Service

log = logging.getLogger("pgqueue.worker")

MAX_BATCHES = 50  # per round; a larger backlog continues in the next round, soon after


class Pruner(Service):
    name = "pruner"

    def __init__(self, pool: Pool, retention: Retention) -> None:
        self.pool = pool
        self.retention = retention

    async def tick(self) -> float:
        retention = self.retention
        batches = 0
        deleted: dict[str, int] = {}
        steps = [
            (target, prune_step(target, age, retention.batch, tallied_only=True))
            for target, age in retention.targets()
        ]
        if retention.by_state():
            # completed batches whose members and callback are gone by now, before the
            # audit log's entries: a worker role that may not delete those (made before
            # audit pruning, not granted again) still prunes all the rest
            steps.insert(
                len(retention.by_state()), ("batches", prune_batches_step(retention.batch))
            )
        async with self.pool.connection() as conn:
            for what, step in steps:
                while batches < MAX_BATCHES:
                    # a statement over finished runs is priced above jit_above_cost on a
                    # deep queue, and compiling it took longer than running it (0.4 to 1 s)
                    async with conn.transaction():
                        await conn.execute(_sql.query("no_jit"))
                        cur = await conn.execute(*step)
                    batches += 1
                    deleted[what] = deleted.get(what, 0) + cur.rowcount
                    if cur.rowcount < retention.batch:
                        break
        if any(deleted.values()):
            log.info(
                "pruned %s",
                ", ".join(f"{n} {what}" for what, n in deleted.items() if n),
                extra={"pruned": deleted},
            )
        if batches >= MAX_BATCHES:
            return 1.0
        # Spread the workers' rounds so that they do not all prune at once.
        return retention.interval * random.uniform(0.8, 1.2)
