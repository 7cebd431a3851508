"""Deletes finished runs (their steps and errors cascade) and events past their
retention, then completed batches whose members and callback are gone, in batches of
Retention.batch rows, each batch its own short statement. Every worker runs one; SKIP
LOCKED lets them share the work without waiting."""

from __future__ import annotations

import logging
import random
from datetime import timedelta

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
        targets: list[tuple[str | None, timedelta]] = list(retention.by_state().items())
        if retention.events is not None:
            targets.append((None, retention.events))
        batches = 0
        deleted: dict[str, int] = {}
        async with self.pool.connection() as conn:
            for state, age in targets:
                while batches < MAX_BATCHES:
                    query, params = prune_step(state, age, retention.batch, tallied_only=True)
                    cur = await conn.execute(query, params)
                    batches += 1
                    deleted[state or "events"] = deleted.get(state or "events", 0) + cur.rowcount
                    if cur.rowcount < retention.batch:
                        break
            # completed batches whose members and callback are gone by now
            while retention.by_state() and batches < MAX_BATCHES:
                cur = await conn.execute(*prune_batches_step(retention.batch))
                batches += 1
                deleted["batches"] = deleted.get("batches", 0) + cur.rowcount
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
