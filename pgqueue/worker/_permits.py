"""Permits of threads that outlive their attempt: a sync attempt of a limited queue whose
outcome is written (timed out) or whose lease is gone while its thread still runs keeps
its place in the queue's limit, filed in pgqueue.zombie_permits until the thread returns,
so that a limited queue's claims never see a moment where neither the run nor its thread
holds the permit."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING
from uuid import UUID

from pgqueue.db import sql as _sql
from pgqueue.worker._service import DB_ERRORS, Pool, outage_delay, reached

if TYPE_CHECKING:
    from pgqueue.worker.maintenance.queue_limits import QueueLimits
    from pgqueue.worker.records import Held

log = logging.getLogger("pgqueue.worker")


class ZombiePermits:
    """Files the permits of worker `worker_id`'s threads through `pool`; only for the
    queues `limits` says have limits."""

    def __init__(
        self, worker_id: UUID, lease_seconds: float, pool: Pool, limits: QueueLimits
    ) -> None:
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.pool = pool
        self.limits = limits
        # the task filing each attempt's permit, until its thread returns
        self.filed: dict[Held, asyncio.Task[None]] = {}
        self._releases: set[asyncio.Task[None]] = set()

    def keep(self, held: Held) -> asyncio.Task[None]:
        """File `held` in pgqueue.zombie_permits (a limited queue's only), for as long as
        its thread runs: the task that does it, done once it is filed (or given up)."""
        task = self.filed.get(held)
        if task is None:
            task = self.filed[held] = asyncio.ensure_future(self._hold(held))
        return task

    def limited(self, queue: str) -> bool:
        return queue in self.limits.limited

    async def _hold(self, held: Held) -> None:
        row = held.row
        if not self.limited(row.queue):
            return
        params = {
            "lease_token": held.lease_token,
            "run_id": held.id,
            "worker_id": self.worker_id,
            "queue": row.queue,
            "group_key": row.group_key,
            "lease_seconds": self.lease_seconds,
        }
        for failures in range(1, 4):
            try:
                async with self.pool.connection() as conn:
                    await conn.execute(_sql.query("hold_zombie_permit"), params)
                reached("keeping a permit", failures - 1)
                return
            except DB_ERRORS as exc:
                await asyncio.sleep(outage_delay("keeping a permit", exc, failures))
            except Exception:
                break
        log.error(
            "run %s (%s): could not keep its permit while its thread runs on; the queue's "
            "limit may be exceeded until it returns",
            held.id,
            row.task,
        )

    def release(self, held: Held) -> None:
        """On the loop: `held`'s thread returned; its permit, if filed, is free."""
        hold = self.filed.pop(held, None)
        if hold is not None:
            release = asyncio.ensure_future(self._drop(held, hold))
            self._releases.add(release)
            release.add_done_callback(self._releases.discard)

    async def _drop(self, held: Held, hold: asyncio.Task[None]) -> None:
        await hold  # filed first, or a late insert would outlive the thread
        failures = 0
        while True:
            try:
                async with self.pool.connection() as conn:
                    await conn.execute(
                        _sql.query("release_zombie_permit"), {"lease_token": held.lease_token}
                    )
                reached("returning a permit", failures)
                return
            except DB_ERRORS as exc:
                # the worker's row goes at exit, and its permits with it
                failures += 1
                await asyncio.sleep(outage_delay("returning a permit", exc, failures))
