"""Leases: the keeper renews every lease this worker holds in one statement, from a thread
of its own; the watchdog tells when the event loop is blocked; the rescuer takes back runs
whose lease expired on some other (dead or cut-off) worker."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue import _sql
from pgqueue.worker._claimed import Claimed
from pgqueue.worker._service import DB_ERRORS, Service, outage_delay

if TYPE_CHECKING:
    from pgqueue.worker import Worker

log = logging.getLogger("pgqueue.worker")


class LeaseKeeper:
    """Renews the leases of the runs this worker claimed, and beats its heartbeat, every
    third of the lease, on a connection and a thread of its own: a task that blocks the
    event loop (time.sleep in an async task) does not cost the worker its leases.

    What to renew: before each renewal the thread asks the loop for the attempts it holds
    (Worker.held, read on the loop only), as the keeper on the loop did. When the loop
    does not answer within SNAPSHOT_WAIT (task code blocks it), the thread renews what the
    last answer held plus the rows of every claim since (add(): one append per claim, no
    cost per run); leases that ended meanwhile are fenced out by their tokens and are
    simply not renewed. A lease held and not renewed was lost: the loop stops its attempt
    (Worker.leases_lost) once it runs again."""

    name = "lease keeper"
    SNAPSHOT_WAIT = 0.5  # seconds the thread waits for the loop's list of held leases

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._claims: deque[Sequence[Claimed]] = deque()  # since the last snapshot
        self._leases: dict[tuple[int, str], None] = {}  # the thread's own
        self._handshake = threading.Lock()  # a snapshot is taken, or given up, not both
        self._stopped = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._thread = threading.Thread(target=self._run, name="pgqueue-leases", daemon=True)

    def add(self, rows: Sequence[Claimed]) -> None:
        """On the loop: a claim landed; its rows are held under lease from now on."""
        self._claims.append(rows)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing (the worker stops); waits for a renewal in flight, briefly."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        failures = 0
        delay = 0.0
        while not self._stopped.wait(delay):
            try:
                delay = self.renew()
                failures = 0
            except DB_ERRORS as exc:
                failures += 1
                self._close()
                # never sleep past a third of the lease: one try must land before it ends
                delay = min(outage_delay(self.name, exc, failures, base=0.2), self._every())
            except Exception:
                failures += 1
                self._close()
                delay = min(5.0, 0.2 * 2**failures, self._every())
                log.exception("%s failed; retrying in %.1fs", self.name, delay)
        self._close()

    def _every(self) -> float:
        return self.worker.lease_seconds / 3

    def renew(self) -> float:
        """One renewal (in the thread): seconds until the next one."""
        worker = self.worker
        snapshot = self._snapshot()
        if snapshot is not None:
            self._leases = leases = dict.fromkeys(snapshot)
        else:
            leases = self._leases
            while self._claims:
                for row in self._claims.popleft():
                    leases[(row.id, row.lease_token)] = None
        if self._conn is None or self._conn.closed:
            # a connect that hangs must not outlast the lease it is meant to renew
            timeout = max(2, int(self._every()))
            self._conn = psycopg.connect(worker.app.dsn, autocommit=True, connect_timeout=timeout)
        held = list(leases)
        params = {
            "worker_id": worker.id,
            "lease_seconds": worker.lease_seconds,
            "id": [run_id for run_id, _ in held],
            "lease_token": [token for _, token in held],
        }
        cur = self._conn.execute(_sql.query("renew_leases"), params)
        renewed = {(row[0], row[1]) for row in cur}
        lost = [lease for lease in held if lease not in renewed]
        for lease in lost:
            del leases[lease]
        if lost:  # those the loop still holds when it gets this (it may be blocked)
            self._to_loop(worker.leases_lost, lost)
        return self._every()

    def _snapshot(self) -> list[tuple[int, str]] | None:
        """In the thread: the leases the loop holds now, or None if it does not answer."""
        answer: list[list[tuple[int, str]]] = []
        answered = threading.Event()
        abandoned = False

        def take() -> None:  # on the loop
            with self._handshake:
                if abandoned:
                    return
                # claims up to now are in worker.held: this snapshot covers them
                self._claims.clear()
                held = self.worker.held
                answer.append(
                    [(h.id, h.lease_token) for h in held if not h.submitted and not h.lost]
                )
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
        loop = self.worker._loop
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


class LoopWatch:
    """Warns when the event loop has been blocked for over a third of the lease, naming
    the task whose code blocks it. The loop beats (a timer every `every` seconds, not a
    cost per run); a thread looks at the beat, and at the loop thread's stack when it
    stalls: the attempt running there is found in its frames, so that nothing has to
    record which attempt is on the loop as each one starts."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.limit = worker.lease_seconds / 3
        self.every = min(0.5, self.limit / 4)
        self.beat = time.monotonic()
        self._loop_thread = 0
        self._handle: Any = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pgqueue-watchdog", daemon=True)

    def start(self) -> None:
        """On the loop."""
        self._loop_thread = threading.get_ident()
        self._tick()
        self._thread.start()

    def stop(self) -> None:
        """On the loop."""
        if self._handle is not None:
            self._handle.cancel()
        self._stopped.set()

    def _tick(self) -> None:
        self.beat = time.monotonic()
        loop = self.worker._loop
        assert loop is not None
        self._handle = loop.call_later(self.every, self._tick)

    def _run(self) -> None:
        warned: float | None = None  # the beat before the stall last warned about
        while not self._stopped.wait(self.every):
            beat = self.beat
            stalled = time.monotonic() - beat
            if stalled > self.limit and warned != beat:
                warned = beat
                log.warning(
                    "the event loop has been blocked for %.1fs (over a third of the %gs "
                    "lease) by %s: leases are still renewed, but nothing else of this worker "
                    "runs meanwhile; call blocking code of an async task in a thread "
                    "(asyncio.to_thread), or make the task sync",
                    stalled,
                    self.worker.lease_seconds,
                    self.culprit(),
                )
            elif warned is not None and beat != warned:
                log.info("the event loop runs again (blocked for about %.1fs)", beat - warned)
                warned = None

    def culprit(self) -> str:
        """What the loop thread is running: the attempt (task and run) if one is on its
        stack, else the innermost function."""
        from pgqueue.worker import Worker, _executor

        codes = {
            _executor.attempt.__code__,
            _executor.run_hook.__code__,
            Worker._execute.__code__,
        }
        top: FrameType | None = sys._current_frames().get(self._loop_thread)
        frame = top
        while frame is not None:
            if frame.f_code in codes:
                held = frame.f_locals.get("held")
                row = getattr(held, "row", None)
                if row is not None:
                    return f"task {row.task!r} (run {row.id})"
            frame = frame.f_back
        if top is None:
            return "unknown code"
        code = top.f_code
        return f"{code.co_qualname} ({code.co_filename}:{top.f_lineno})"


class Rescuer(Service):
    name = "rescuer"

    async def tick(self) -> float:
        worker = self.worker
        async with worker.pool.connection() as conn:
            for queue in worker.queues:
                while True:
                    cur = await conn.execute(
                        _sql.query("rescue_expired"), {"queue": queue, "limit": 100}
                    )
                    rows = await cur.fetchall()
                    for run_id, state, _ in rows:
                        log.warning("run %s: lease expired, rescued -> %s", run_id, state)
                    if len(rows) < 100:
                        break
        return worker.rescue_interval


class WorkerPruner(Service):
    name = "worker pruner"

    async def tick(self) -> float:
        stale = max(60.0, self.worker.lease_seconds * 4)
        async with self.worker.pool.connection() as conn:
            await conn.execute(_sql.query("prune_workers"), {"stale_seconds": stale})
        return 60.0
