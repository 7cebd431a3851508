"""Wake-ups: a dedicated connection LISTENs for new queued runs, cancels, queue config and
due times.

NOTIFY is an accelerator, never the source of truth: after every (re)connect the worker
looks at everything (claims, checks the runs it holds, re-reads the limits, stages), and
it polls every poll_interval anyway. Any role that can connect can NOTIFY on any channel,
so a notification is only ever a hint to look at the database, and what any number of
them can cost this process is bounded:

- The connection only listens: once LISTEN is in place no statement runs on it, so no
  result ever waits behind notifications (a claim's rows that arrived seconds after
  their lease began would be lost leases).
- It is read on the event loop as libpq parses it: one read of the socket (libpq's input
  buffer, some kilobytes) per turn of the loop, every notification of it folded at once
  into a summary of fixed size (the served queues heard of, up to CANCEL_PENDING_MAX run
  ids else "check every run held", config heard of, due heard of) and then dropped.
  Memory stays libpq's buffer plus that summary, and the loop's other work runs between
  two reads, however many notifications arrive. What is not read yet waits in the
  server's queue.
- After each read the summary is acted on, once for the whole read:

pgqueue_queued  an idle worker claims the queue's runs on a connection of the pool (see
                pgqueue.worker.producer, pick_up; one pick-up at a time, the queues heard
                of meanwhile after it); a busy one wakes the claim loop (an event: a
                thousand wake-ups are one claim)
pgqueue_cancel  the runs named are checked in one statement (sql/leases_held.sql) and
                only those no longer leased to this worker are stopped
pgqueue_config  the queues' limits are read again, at most once per CONFIG_EVERY
pgqueue_due     the stager looks at its queues' due times again (a delayed event was
                emitted: its waiters are due when it is), at most once per DUE_EVERY

A flood delays real notifications: the server sends every listener the notifications of
all senders in commit order, so an enqueue's own notification can sit behind a million
forged ones. While notifications keep coming (FLOOD_NOTES since the last look), the
worker also looks at its queues every LOOK_EVERY, whatever they say: one look per burst
(and at most one per LOOK_EVERY), so a run enqueued during a flood starts within
LOOK_EVERY plus a claim.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import pq

from pgqueue.db import faults as _faults
from pgqueue.db import sql as _sql
from pgqueue.worker._service import DB_ERRORS, Pool, outage_delay, reached

if TYPE_CHECKING:
    from pgqueue.worker.records import Held

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
# Seconds between two nudges of the stager on NOTIFY, at least: a delayed event's waiters
# are staged within 100 ms of their due time (docs/workflows.md), so well under that.
DUE_EVERY = 0.02
RUN_ID_DIGITS = 19  # a bigint's; a longer payload is not a run id
# A flood: this many notifications read since the last look at the queues. Then the
# queues are looked at every LOOK_EVERY seconds until the notifications stop. Reading a
# thousand takes a millisecond or two: fewer cannot hide a notification for long.
FLOOD_NOTES = 1000
LOOK_EVERY = 0.1
# The listener's longest wait between two reconnects. Until it is back, idle workers hear
# of new runs only at their next poll (every poll_interval, 5 s by default): a failover or
# a restart would otherwise cost seconds of pickup latency after the server is back. A try
# against a server that is down or a standby costs one refused or closed connection.
RECONNECT_CAP = 1.0

_QUEUED, _CANCEL, _CONFIG, _DUE = (c.encode() for c in (QUEUED, CANCEL, CONFIG, DUE))

PickUp = Callable[[str], Awaitable[int]]


class Listener:
    """LISTENs on its own connection to `dsn` for the served `queues`: on new work of a
    queue, `pick_up(queue)` while `idle()`, else `wake()`; `lose(run_id, why)` for a run
    of `held` whose lease is no longer this worker's, `refresh_limits()` when a queue's
    limits changed, `due()` when a queue's due times did."""

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
        self.backend_pid: int | None = None  # of the connection LISTENing, once connected
        self.connected = asyncio.Event()
        self.notes = 0  # notifications read, ever
        # The summary of what was read (see the module's docstring), bounded whatever
        # arrives: served queues (as the payloads carry them: the connection's encoding)
        self._served: dict[bytes, str] = {}
        self._queued: set[str] = set()  # served queues heard of, for the next pick-up
        self._cancels: set[int] = set()
        self._check_all = False
        self._config = False
        self._due = False
        self._unlooked = 0  # notifications read since the last look at every queue
        self._looked = 0.0  # when (loop time)
        self._queued_hint = asyncio.Event()
        self._cancel_hint = asyncio.Event()
        self._config_hint = asyncio.Event()
        self._due_hint = asyncio.Event()

    async def run(self) -> None:
        checks = [
            asyncio.create_task(self._pick_up()),
            asyncio.create_task(self._check_cancels()),
            asyncio.create_task(self._refresh_config()),
            asyncio.create_task(self._nudge_stager()),
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
                    # Notifications read while LISTEN runs are dropped (psycopg would keep
                    # them, without bound): the look at everything below covers them.
                    conn.pgconn.notify_handler = None
                    await conn.execute(
                        f"LISTEN {QUEUED}; LISTEN {CANCEL}; LISTEN {CONFIG}; LISTEN {DUE}"
                    )
                    self._served = served_payloads(self.queues, conn.info.encoding)
                    self.backend_pid = conn.info.backend_pid
                    self.connected.set()
                    reached("listener", failures)
                    failures = 0
                    self._look_at_everything()  # what was sent while we were not listening
                    await self._read(conn.pgconn)
            except asyncio.CancelledError:
                raise
            except DB_ERRORS as exc:
                self.connected.clear()
                failures += 1
                delay = outage_delay("listener", exc, failures, cap=RECONNECT_CAP)
                await asyncio.sleep(delay)

    async def _read(self, pgconn: pq.abc.PGconn) -> None:
        """Read the connection as long as it lives, one read per turn of the loop, each
        folded into the summary and acted on (module docstring). After a read that
        brought notifications the next turn reads again (TLS may hold decrypted bytes
        that the socket no longer shows); after one that brought none, the next waits
        for the socket."""
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        fd = pgconn.socket
        loop.add_reader(fd, readable.set)
        try:
            self._act(self._fold(pgconn))  # parsed already, after LISTEN's result
            while True:
                readable.clear()
                pgconn.consume_input()  # raises if the connection was lost
                if pgconn.status != pq.ConnStatus.OK:
                    raise psycopg.OperationalError("the listener's connection was closed")
                notes = self._fold(pgconn)
                self._act(notes)
                if notes:
                    await asyncio.sleep(0)
                else:
                    await readable.wait()
        finally:
            loop.remove_reader(fd)

    def _fold(self, pgconn: pq.abc.PGconn) -> int:
        """Fold the notifications libpq parsed into the summary: how many there were."""
        notifies = pgconn.notifies
        served = self._served
        queued = self._queued
        cancel_hint = self.cancel_hint
        config = due = False
        n = 0
        while (note := notifies()) is not None:
            n += 1
            channel, _, payload = note
            if channel == _QUEUED:
                queue = served.get(payload)
                if queue is not None:
                    queued.add(queue)
            elif channel == _CANCEL:
                cancel_hint(payload)
            elif channel == _CONFIG:
                config = config or payload in served
            elif channel == _DUE:
                due = due or payload in served
        self._config = self._config or config
        self._due = self._due or due
        return n

    def _act(self, notes: int) -> None:
        """Hand what one read brought to the duties that look (each at its own pace)."""
        self.notes += notes
        if self._queued:
            self._queued_hint.set()
        if self._config:
            self._config = False
            self._config_hint.set()
        if self._due:
            self._due = False
            self._due_hint.set()
        self._unlooked += notes
        if self._unlooked >= FLOOD_NOTES:
            now = asyncio.get_running_loop().time()
            if now - self._looked >= LOOK_EVERY:
                self._unlooked = 0
                self._looked = now
                self.wake()  # a real notification may wait behind these (docstring)

    def _look_at_everything(self) -> None:
        """After (re)connecting: whatever was sent while nothing listened."""
        self.wake()
        self._check_all = True
        self._cancel_hint.set()
        self._config_hint.set()
        self._due_hint.set()

    def cancel_hint(self, payload: bytes | str) -> None:
        """A pgqueue_cancel payload: remember the run id for the next look."""
        if not (payload.isascii() and payload.isdigit() and len(payload) <= RUN_ID_DIGITS):
            return  # not a run id (int() would take "²" or "1_0", and fail on some)
        if len(self._cancels) < CANCEL_PENDING_MAX:
            self._cancels.add(int(payload))
        else:
            self._check_all = True
        self._cancel_hint.set()

    async def _pick_up(self) -> None:
        """Claim the runs of the served queues heard of, one pick-up at a time."""
        while True:
            await self._queued_hint.wait()
            self._queued_hint.clear()
            queues, self._queued = self._queued, set()
            for queue in queues:
                if self.pick_up is None or self.idle is None or not self.idle():
                    self.wake()
                    continue
                try:
                    await self.pick_up(queue)
                except DB_ERRORS:
                    self.wake()  # the claim loop claims them, and reports the outage
                except Exception:
                    log.exception("claim on notification failed; the claim loop claims instead")
                    self.wake()

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
            reached("cancel check", failures)
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
                # an outage: the limits' own duty reports it, and retries
                log.debug("queue limits: %s; its own tick tries again", _faults.describe(exc))
            except Exception:
                log.exception("queue limits: refresh failed; its own tick tries again")
            self.wake()
            # Notifications that arrive meanwhile make one more refresh, after this pause.
            await asyncio.sleep(CONFIG_EVERY)

    async def _nudge_stager(self) -> None:
        while True:
            await self._due_hint.wait()
            self._due_hint.clear()
            if self.due is not None:
                self.due()
            await asyncio.sleep(DUE_EVERY)  # likewise


def served_payloads(queues: list[str], encoding: str) -> dict[bytes, str]:
    """The payloads that name a served queue, as they arrive (in the connection's
    encoding; a name it cannot encode cannot arrive), and the queue each names."""
    served = {}
    for queue in queues:
        try:
            served[queue.encode(encoding)] = queue
        except UnicodeEncodeError:
            continue
    return served
