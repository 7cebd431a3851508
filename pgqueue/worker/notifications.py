"""Wake-ups: a dedicated connection LISTENs for new queued runs, cancels and queue config.

NOTIFY is an accelerator, never the source of truth: after every (re)connect the worker
polls, and it polls every poll_interval anyway. Any role that can connect can NOTIFY on
any channel, so a notification is only ever a hint to look at the database, and a burst
of them costs one look, not one per notification:

pgqueue_queued  an idle worker claims the queue's runs on this very connection (see
                pgqueue.worker.producer, pick_up); a busy one wakes the claim loop (an
                event: a thousand wake-ups are one claim)
pgqueue_cancel  the runs named are checked in one statement (sql/leases_held.sql) and
                only those no longer leased to this worker are stopped
pgqueue_config  the queues' limits are read again, at most once per CONFIG_EVERY
pgqueue_due     the stager looks at its queues' due times again (a delayed event was
                emitted: its waiters are due when it is)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue import _faults, _sql
from pgqueue.worker._service import DB_ERRORS, Pool, outage_delay
from pgqueue.worker.connection import configure_connection

if TYPE_CHECKING:
    from pgqueue.worker.attempt import Held

log = logging.getLogger("pgqueue.worker")

QUEUED = "pgqueue_queued"
CANCEL = "pgqueue_cancel"
CONFIG = "pgqueue_config"
DUE = "pgqueue_due"

# How long the cancel checker waits after a first cancel before it looks: the rest of a
# burst (pgqueue.cancel of a tree notifies once per run) lands in the same look.
CANCEL_GATHER = 0.02
# Run ids remembered between two looks, at most: past it (a flood of made-up ids) the next
# look checks every run this worker holds instead, which costs the same one statement.
CANCEL_PENDING_MAX = 1024
CONFIG_EVERY = 0.5  # seconds between two refreshes of the queues' limits on NOTIFY, at least
RUN_ID_DIGITS = 19  # a bigint's; a longer payload is not a run id
# The listener's longest wait between two reconnects. Until it is back, idle workers hear
# of new runs only at their next poll (every poll_interval, 5 s by default): a failover or
# a restart would otherwise cost seconds of pickup latency after the server is back. A try
# against a server that is down or a standby costs one refused or closed connection.
RECONNECT_CAP = 1.0


PickUp = Callable[[psycopg.AsyncConnection[Any], str], Awaitable[int]]


class Listener:
    """LISTENs on its own connection to `dsn` for the served `queues`: on new work of a
    queue, `pick_up(conn, queue)` on that connection while `idle()`, else `wake()`;
    `lose(run_id, why)` for a run of `held` whose lease is no longer this worker's,
    `refresh_limits()` when a queue's limits changed."""

    def __init__(
        self,
        dsn: str,
        pool: Pool,
        queues: list[str],
        held: set[Held],
        wake: Callable[[], None],
        lose: Callable[[int, str], None],
        refresh_limits: Callable[[], Coroutine[Any, Any, None]],
        due: Callable[[], None] | None = None,
        idle: Callable[[], bool] | None = None,
        pick_up: PickUp | None = None,
        connect_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.dsn = dsn
        self.pool = pool
        self.queues = queues
        self.held = held
        self.wake = wake
        self.lose = lose
        self.refresh_limits = refresh_limits
        self.due = due
        self.idle = idle
        self.pick_up = pick_up
        self.connect_kwargs = connect_kwargs or {}
        self._served = set(queues)
        self.backend_pid: int | None = None  # of the connection LISTENing, once connected
        self.connected = asyncio.Event()
        self._cancels: set[int] = set()
        self._check_all = False
        self._cancel_hint = asyncio.Event()
        self._config_hint = asyncio.Event()

    async def run(self) -> None:
        checks = [
            asyncio.create_task(self._check_cancels()),
            asyncio.create_task(self._refresh_config()),
        ]
        try:
            await self._listen()
        finally:
            for t in checks:
                t.cancel()
            await asyncio.gather(*checks, return_exceptions=True)

    async def _listen(self) -> None:
        failures = 0
        while True:
            try:
                kwargs = self.connect_kwargs | {"autocommit": True}
                conn = await psycopg.AsyncConnection.connect(self.dsn, **kwargs)
                async with conn:
                    await configure_connection(conn)  # a claim's rows decode as the pool's
                    await conn.execute(f"LISTEN {QUEUED}")
                    await conn.execute(f"LISTEN {CANCEL}")
                    await conn.execute(f"LISTEN {CONFIG}")
                    await conn.execute(f"LISTEN {DUE}")
                    self.backend_pid = conn.info.backend_pid
                    self.connected.set()
                    failures = 0
                    self.wake()  # anything enqueued while we were not listening
                    while True:
                        await self._serve(conn)
            except asyncio.CancelledError:
                raise
            except DB_ERRORS as exc:
                self.connected.clear()
                failures += 1
                delay = outage_delay("listener", exc, failures, cap=RECONNECT_CAP)
                await asyncio.sleep(delay)

    async def _serve(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """One batch of notifications (those that came in one read, or while the
        connection ran a claim): the generator holds the connection until it returns,
        and a claim on the connection must wait for that."""
        served = self._served
        queued: list[str] = []
        async for note in conn.notifies(stop_after=1):
            if note.channel == QUEUED:
                if note.payload in served and note.payload not in queued:
                    queued.append(note.payload)
            elif note.channel == CANCEL:
                self.cancel_hint(note.payload)
            elif note.channel == CONFIG and note.payload in served:
                self._config_hint.set()
            elif note.channel == DUE and note.payload in served and self.due:
                self.due()
        for queue in queued:
            if self.pick_up is None or self.idle is None or not self.idle():
                self.wake()
                continue
            try:
                await self.pick_up(conn, queue)
            except DB_ERRORS:
                self.wake()  # the claim loop claims them while this reconnects
                raise
            except Exception:
                log.exception("claim on notification failed; the claim loop claims instead")
                self.wake()

    def cancel_hint(self, payload: str) -> None:
        """A pgqueue_cancel payload: remember the run id for the next look."""
        if not (payload.isascii() and payload.isdigit() and len(payload) <= RUN_ID_DIGITS):
            return  # not a run id (int() would take "²" or "1_0", and fail on some)
        if len(self._cancels) < CANCEL_PENDING_MAX:
            self._cancels.add(int(payload))
        else:
            self._check_all = True
        self._cancel_hint.set()

    async def _check_cancels(self) -> None:
        failures = 0
        while True:
            await self._cancel_hint.wait()
            await asyncio.sleep(CANCEL_GATHER)
            self._cancel_hint.clear()
            ids, self._cancels = self._cancels, set()
            everything, self._check_all = self._check_all, False
            held = [
                h
                for h in self.held
                if not h.submitted and not h.lost and (everything or h.id in ids)
            ]
            if not held:
                continue
            try:
                still = await self._still_held(held)
            except Exception as exc:
                # Look again later; the lease keeper finds out meanwhile anyway.
                failures += 1
                self._cancels.update(h.id for h in held)
                self._cancel_hint.set()
                if isinstance(exc, DB_ERRORS):
                    delay = outage_delay("cancel check", exc, failures)
                else:
                    delay = min(5.0, 0.2 * 2**failures)
                    log.exception("cancel check failed; retrying in %.1fs", delay)
                await asyncio.sleep(delay)
                continue
            failures = 0
            for h in held:
                if h.id not in still:
                    self.lose(h.id, "it was canceled (or its lease was taken)")

    async def _still_held(self, held: list[Held]) -> set[int]:
        params = {"id": [h.id for h in held], "lease_token": [h.lease_token for h in held]}
        async with self.pool.connection() as conn:
            cur = await conn.execute(_sql.query("leases_held"), params)
            return {row[0] for row in await cur.fetchall()}

    async def _refresh_config(self) -> None:
        while True:
            await self._config_hint.wait()
            self._config_hint.clear()
            try:  # a limit changed or the queue was paused/resumed
                await self.refresh_limits()
            except DB_ERRORS as exc:
                log.warning("queue limits: %s; its own tick tries again", _faults.describe(exc))
            except Exception:
                log.exception("queue limits: refresh failed; its own tick tries again")
            self.wake()
            # Notifications that arrive meanwhile make one more refresh, after this pause.
            await asyncio.sleep(CONFIG_EVERY)
