"""Writes the outcomes of attempts in batches: one statement for everything that finished
while the previous write was in flight."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pgqueue import _sql
from pgqueue.worker._service import DB_ERRORS, outage_delay

if TYPE_CHECKING:
    from pgqueue.worker import Worker

log = logging.getLogger("pgqueue.worker")


@dataclass(frozen=True)
class Outcome:
    """What became of one attempt. `state` is the run's next state."""

    id: int
    lease_token: UUID
    state: str
    result: str | None = None  # JSON text
    error: str | None = None
    error_kind: str | None = None
    traceback: str | None = None
    delay: float | None = 0.0
    refund: bool = False
    wait_event: str | None = None
    wait_key: str | None = None
    wait_since: datetime | None = None
    wait_run_id: int | None = None


class Completer:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._pending: list[tuple[Outcome, asyncio.Future[bool]]] = []
        self._ready = asyncio.Event()

    async def submit(self, outcome: Outcome) -> bool:
        """Queue the outcome for the next batch; True once written, False if fenced out."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((outcome, future))
        self._ready.set()
        return await future

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            written = await self._write_with_retry([o for o, _ in batch])
            # Runs that left `running` gave their permits back: a claim of a limited
            # queue that found no room a moment ago may find some now.
            self.worker.wake()
            for outcome, future in batch:
                if not future.done():
                    future.set_result(outcome.id in written)

    async def _write_with_retry(self, outcomes: list[Outcome]) -> set[int]:
        failures = 0
        while True:
            try:
                return await self._write(outcomes)
            except DB_ERRORS as exc:
                # Keep the outcomes: they are written when the database is back, unless
                # the leases expired meanwhile (then the fence rejects them and the runs
                # are rescued: at-least-once).
                failures += 1
                delay = outage_delay("completer", exc, failures)
                await asyncio.sleep(delay)

    async def _write(self, outcomes: list[Outcome]) -> set[int]:
        params: dict[str, Any] = {
            f.name: [getattr(o, f.name) for o in outcomes] for f in fields(Outcome)
        }
        params["worker_id"] = self.worker.id
        async with self.worker.pool.connection() as conn:
            cur = await conn.execute(_sql.query("complete"), params)
            return {row[0] for row in await cur.fetchall()}
