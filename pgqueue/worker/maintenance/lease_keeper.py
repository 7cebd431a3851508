"""The lease keeper: renews every lease this worker holds in one statement, from a thread
of its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import psycopg

from pgqueue.db import connect as db
from pgqueue.db import faults as _faults
from pgqueue.db import sql as _sql
from pgqueue.worker._service import DB_ERRORS, outage, outage_delay, reached, use_outage
from pgqueue.worker.records import Claimed

log = logging.getLogger("pgqueue.worker")


class LeaseClock:
    """Until when the leases this worker renewed last are valid at least (monotonic): the
    start of the last renewal that committed plus the lease (leases claimed since hold
    longer). The lease keeper moves it (renewed); the completer, the executor and the
    probes ask what is left (left(), any thread). An object of its own so that those can
    be built before the lease keeper, which is built from the executor."""

    def __init__(self, lease_seconds: float) -> None:
        self.lease_seconds = lease_seconds
        self.valid_until = time.monotonic() + lease_seconds

    def renewed(self, started: float) -> None:
        """A renewal that started at `started` (monotonic) committed."""
        self.valid_until = started + self.lease_seconds

    def left(self) -> float:
        """Seconds the leases renewed last are still valid, at least (any thread)."""
        return self.valid_until - time.monotonic()


class LeaseKeeper:
    """Renews the leases of the runs this worker claimed, and beats its heartbeat, every
    third of the lease, on a connection and a thread of its own: a task that blocks the
    event loop (time.sleep in an async task) does not cost the worker its leases.

    What to renew: before each renewal the thread asks the loop for the leases it holds
    (`held()`, called on the loop only). When the loop does not answer within
    SNAPSHOT_WAIT (task code blocks it), the thread renews the latest list the loop left
    it: the answer to the last snapshot, or what the loop held at its last claim plus that
    claim's rows (add(): the loop's list is bounded by the concurrency, so memory does not
    grow with throughput); leases that ended meanwhile are fenced out by their tokens and
    are simply not renewed. A lease held and not renewed was lost: `lost(leases)` is called
    on the loop (which stops those attempts) once it runs again.

    Faults: a renewal that lost its connection is tried again at once on a fresh one (a
    connection found dead while idle is replaced before it is used), and between later
    tries the keeper never waits longer than a third of what is left of the leases it
    last renewed (`clock`, a LeaseClock of its own unless given one): a few tries land
    before they expire."""

    name = "lease keeper"
    SNAPSHOT_WAIT = 0.5  # seconds the thread waits for the loop's list of held leases
    RETRY_MIN = 0.05  # seconds between two tries at least, once a fresh connection failed

    def __init__(
        self,
        dsn: str,
        worker_id: UUID,
        lease_seconds: float,
        held: Callable[[], list[tuple[int, str]]],
        lost: Callable[[list[tuple[int, str]]], None],
        running: Callable[[], list[str]] | None = None,
        pooler: str | None = None,
        clock: LeaseClock | None = None,
    ) -> None:
        self.dsn = dsn
        self.pooler = pooler
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.held = held
        self.lost = lost
        self.running = running
        self._loop: asyncio.AbstractEventLoop | None = None
        # The loop's latest list of held leases (replaced whole: one reference swap, which
        # the thread reads without a lock), and those of it the thread found lost since.
        self._latest: list[tuple[int, str]] = []
        self._gone: set[tuple[int, str]] = set()
        self._handshake = threading.Lock()  # a snapshot is taken, or given up, not both
        self._stopped = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self.clock = clock if clock is not None else LeaseClock(lease_seconds)
        self._outage = outage()
        self._thread = threading.Thread(target=self._run, name="pgqueue-leases", daemon=True)

    def add(self, rows: Sequence[Claimed]) -> None:
        """On the loop: a claim landed; its rows are held under lease from now on. The
        thread's fallback becomes what the loop holds now plus these rows (not a list of
        every claim since the last snapshot: that grew with the throughput, and kept tens
        of thousands of entries alive for a third of the lease)."""
        latest = self.held()
        latest.extend([(row.id, row.lease_token) for row in rows])
        self._latest = latest

    def start(self) -> None:
        """On the loop, whose held leases it renews."""
        self._loop = asyncio.get_running_loop()
        self.clock.renewed(time.monotonic())
        self._outage = outage()  # the worker's, which its thread reports to
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing (the worker stops); waits for a renewal in flight, briefly."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        use_outage(self._outage)
        failures = 0
        delay = 0.0
        while not self._stopped.wait(delay):
            try:
                delay = self.renew()
                reached(self.name, failures)
                failures = 0
            except DB_ERRORS as exc:
                failures += 1
                self._close()
                delay = min(outage_delay(self.name, exc, failures, base=0.2), self._retry_cap())
            except Exception:
                failures += 1
                self._close()
                delay = min(5.0, 0.2 * 2**failures, self._retry_cap())
                log.exception("%s failed; retrying in %.1fs", self.name, delay)
        self._close()

    def _every(self) -> float:
        return self.lease_seconds / 3

    @property
    def valid_until(self) -> float:
        """(monotonic) until when the leases renewed last are valid at least."""
        return self.clock.valid_until

    def left(self) -> float:
        """Seconds the leases renewed last are still valid, at least (any thread)."""
        return self.clock.left()

    def _retry_cap(self) -> float:
        """The longest wait before the next try: a third of what is left of the leases
        (a third of the lease once they ran out: the next claim's are fresh)."""
        left = self.left()
        return min(self._every(), max(self.RETRY_MIN, left / 3 if left > 0 else self._every()))

    def renew(self) -> float:
        """One renewal (in the thread): seconds until the next one."""
        snapshot = self._snapshot()
        running = None
        if snapshot is not None:
            held, running = snapshot
            self._gone = set()
        else:  # lost ones were told already: renew (and tell) only the others
            held = [lease for lease in self._latest if lease not in self._gone]
        if self._conn is not None and _faults.dead(self._conn):
            self._close()  # killed while it waited for this renewal: no failed try for that
        if self._conn is None:
            # a connect that hangs must not outlast the lease it is meant to renew
            timeout = max(2, int(self._every()))
            self._conn = psycopg.connect(
                self.dsn, connect_timeout=timeout, **db.connect_kwargs(self.pooler)
            )
        params = {
            "worker_id": self.worker_id,
            "lease_seconds": self.lease_seconds,
            "id": [run_id for run_id, _ in held],
            "lease_token": [token for _, token in held],
            # with the loop's answer only: which filed permits are this worker's still
            "running": running,
        }
        started = time.monotonic()
        cur = self._conn.execute(_sql.query("renew_leases"), params)
        renewed = {(row[0], row[1]) for row in cur}
        self.clock.renewed(started)
        lost = [lease for lease in held if lease not in renewed]
        self._gone.update(lost)
        if lost:  # those the loop still holds when it gets this (it may be blocked)
            self._to_loop(self.lost, lost)
        return self._every()

    def _snapshot(self) -> tuple[list[tuple[int, str]], list[str] | None] | None:
        """In the thread: the leases the loop holds now and the tokens of the attempts
        whose code runs (see `running`), or None if it does not answer."""
        answer: list[tuple[list[tuple[int, str]], list[str] | None]] = []
        answered = threading.Event()
        abandoned = False

        def take() -> None:  # on the loop
            with self._handshake:
                if abandoned:
                    return
                held = self.held()
                self._latest = held
                answer.append((held, self.running() if self.running else None))
            answered.set()

        if not self._to_loop(take):
            return None
        answered.wait(self.SNAPSHOT_WAIT)
        with self._handshake:
            if not answer:
                abandoned = True
                return None
        return answer[0]

    def _to_loop(self, callback: Any, *args: Any) -> bool:
        loop = self._loop
        try:
            if loop is not None:
                loop.call_soon_threadsafe(callback, *args)
                return True
        except RuntimeError:  # the loop is closed: the worker has stopped
            pass
        return False

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken one, closed as well as it can be
                conn.close()
