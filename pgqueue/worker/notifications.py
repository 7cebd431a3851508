"""Wake-ups: a dedicated connection LISTENs for new queued runs and for cancels.

NOTIFY is an accelerator, never the source of truth: after every (re)connect the worker
polls, and it polls every poll_interval anyway.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import psycopg

from pgqueue.worker._service import DB_ERRORS, outage_delay

if TYPE_CHECKING:
    from pgqueue.worker import Worker

log = logging.getLogger("pgqueue.worker")

QUEUED = "pgqueue_queued"
CANCEL = "pgqueue_cancel"
CONFIG = "pgqueue_config"


class Listener:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.connected = asyncio.Event()

    async def run(self) -> None:
        failures = 0
        served = set(self.worker.queues)
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.worker.app.dsn, autocommit=True)
                async with conn:
                    await conn.execute(f"LISTEN {QUEUED}")
                    await conn.execute(f"LISTEN {CANCEL}")
                    await conn.execute(f"LISTEN {CONFIG}")
                    self.connected.set()
                    failures = 0
                    self.worker.wake()  # anything enqueued while we were not listening
                    async for note in conn.notifies():
                        if note.channel == QUEUED:
                            if note.payload in served:
                                self.worker.wake()
                        elif note.channel == CANCEL and note.payload.isdigit():
                            self.worker.lose(int(note.payload), "it was canceled")
                        elif note.channel == CONFIG and note.payload in served:
                            # a limit changed or the queue was paused/resumed
                            await self.worker.queue_limits.refresh()
                            self.worker.wake()
            except asyncio.CancelledError:
                raise
            except DB_ERRORS as exc:
                self.connected.clear()
                failures += 1
                delay = outage_delay("listener", exc, failures)
                await asyncio.sleep(delay)
