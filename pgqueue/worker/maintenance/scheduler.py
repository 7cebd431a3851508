"""Fires the due ticks of cron schedules (pgqueue.schedules).

Every worker runs one; they share the work through the database. A round locks the due
schedules with SKIP LOCKED, enqueues their ticks (one idempotency key per schedule and
tick), and moves each schedule's next_fire_at past them, all in one transaction: a tick
is enqueued once, and a crash before the commit leaves it for the next round."""

from __future__ import annotations

import logging
from datetime import datetime

from pgqueue.db import sql as _sql
from pgqueue.schedules.schedule import due_ticks, tick_key
from pgqueue.worker._service import Pool, Service

log = logging.getLogger("pgqueue.worker")

BATCH = 100  # schedules per round
MAX_SLEEP = 1.0  # seconds: also how soon a schedule changed elsewhere is seen
MIN_SLEEP = 0.01
BUSY_SLEEP = 0.25


class SchedulerRollback(Exception):
    """A schedule moved under us (it should not, we hold its lock): undo the round."""


class Scheduler(Service):
    name = "scheduler"

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._broken: set[tuple[str, str, str]] = set()

    async def tick(self) -> float:
        advanced = BATCH
        while advanced >= BATCH:
            advanced = await self.fire_due()
        async with self.pool.connection() as conn:
            cur = await conn.execute(_sql.query("schedules_next_due"))
            row = await cur.fetchone()
        wait = float(row[0]) if row and row[0] is not None else MAX_SLEEP
        if wait <= 0 and not advanced:
            # Due, but locked by another worker's scheduler (or not computable here):
            # look again soon rather than spin.
            return BUSY_SLEEP
        return max(MIN_SLEEP, min(MAX_SLEEP, wait))

    async def fire_due(self) -> int:
        """One round: fire what is due now. Returns how many schedules it advanced."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(_sql.query("schedules_due"), {"limit": BATCH})
            due = await cur.fetchall()
            if not due:
                return 0
            ticks: list[tuple[str, datetime]] = []
            advance: list[tuple[str, datetime, datetime]] = []
            for name, cron, tz, catch_up, next_fire_at, now in due:
                planned = self._plan(name, cron, tz, catch_up, next_fire_at, now)
                if planned is None:
                    continue
                fire, following = planned
                ticks.extend((name, t) for t in fire)
                advance.append((name, next_fire_at, following))
            cur = await conn.execute(
                _sql.query("fire_schedule_ticks"),
                {
                    "name": [n for n, _ in ticks],
                    "tick": [t for _, t in ticks],
                    "idempotency_key": [tick_key(n, t) for n, t in ticks],
                },
            )
            last: dict[str, tuple[datetime, int]] = {}
            for name, tick, run_id in await cur.fetchall():
                last[name] = (tick, run_id)
            cur = await conn.execute(
                _sql.query("advance_schedules"),
                {
                    "name": [n for n, _, _ in advance],
                    "old_next_fire_at": [old for _, old, _ in advance],
                    "next_fire_at": [new for _, _, new in advance],
                    "last_fire_at": [last[n][0] if n in last else None for n, _, _ in advance],
                    "last_run_id": [last[n][1] if n in last else None for n, _, _ in advance],
                },
            )
            moved = len(await cur.fetchall())
            if moved != len(advance):
                raise SchedulerRollback(
                    f"{len(advance) - moved} schedules changed during a scheduler round; "
                    "it was rolled back and will run again"
                )
        for name, (tick, run_id) in last.items():
            log.info(
                "schedule %s: tick %s -> run %s",
                name,
                tick.isoformat(),
                run_id,
                extra={"schedule": name, "tick": tick.isoformat(), "run_id": run_id},
            )
        return len(advance)

    def _plan(
        self,
        name: str,
        cron: str,
        tz: str,
        catch_up: bool,
        next_fire_at: datetime,
        now: datetime,
    ) -> tuple[list[datetime], datetime] | None:
        try:
            fire, following = due_ticks(cron, tz, next_fire_at, now, catch_up=catch_up)
        except ValueError as exc:
            # Written by hand, or a zone this machine lacks: skip it, say so once.
            if (name, cron, tz) not in self._broken:
                self._broken.add((name, cron, tz))
                log.error("schedule %s cannot be computed here (%s); skipping it", name, exc)
            return None
        if len(fire) > 1:
            log.info("schedule %s: catching up %d missed ticks", name, len(fire))
        return fire, following
