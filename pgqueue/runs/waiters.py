"""The waiters of one process: every RunHandle.wait() and wait_async() of an App shares one
connection, which LISTENs on pgqueue_done (a finished run's id, sent only for runs someone
watches: sql/watch_run.sql) and polls, once per interval for all of them, which of the
runs waited on have settled (sql/runs_settled.sql): a thousand waiters cost one
connection, one LISTEN and one poll statement a second.

A notification or a poll only wakes a waiter; the waiter reads its run itself (through
the App's pool) and decides. The wait_async() calls an event loop starts together ask for
their NOTIFY in one statement per batch (watch_async, sql/watch_runs.sql), which also wakes
those whose run has ended already: a wait makes no round trip of its own until woken.
While the shared connection is down, waiters poll their run themselves every
poll_interval, so a lost connection costs latency, never a result. Through a pooler in
transaction mode (Database.listens is false) the connection only polls.

The thread and its connection start with the first waiter and end once no one has waited
for IDLE_EXIT seconds (or at App.close(), which closes the database).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue.db import connect as db
from pgqueue.db import faults as _faults
from pgqueue.db import sql as _sql

if TYPE_CHECKING:
    from pgqueue.db.database import Database

log = logging.getLogger("pgqueue")

CHANNEL = "pgqueue_done"
IDLE_EXIT = 30.0  # seconds without a waiter after which the thread closes its connection
POLL_MIN = 0.05  # seconds between two polls at least, whatever a waiter asks for
CONNECT_WAIT = 2.0  # how long a new waiter waits for the shared LISTEN before it goes on


class Waiter(ABC):
    """One wait() or wait_async() in progress: `wake()` tells it to look (from any
    thread). `watched`: whether its run's NOTIFY is asked for (None while a batch of
    watch_async is asking). Slots, no closure: a thousand waits hold a thousand."""

    __slots__ = ("poll_interval", "run_id", "watched")

    def __init__(self, run_id: int, poll_interval: float) -> None:
        self.run_id = run_id
        self.poll_interval = poll_interval
        self.watched: bool | None = False

    @abstractmethod
    def wake(self) -> None:
        """Tell the waiter to read its run (from any thread)."""


class ThreadWaiter(Waiter):
    """A wait() in a thread: woken through a threading.Event."""

    __slots__ = ("event",)

    def __init__(self, run_id: int, poll_interval: float) -> None:
        super().__init__(run_id, poll_interval)
        self.event = threading.Event()

    def wake(self) -> None:
        self.event.set()


class LoopWaiter(Waiter):
    """A wait_async() of the running loop, woken from any thread. It sleeps on a bare
    future with a timer, not an asyncio.Event under asyncio.timeout(): an Event holds a
    deque, a timeout a context object, for each of a thousand waits."""

    __slots__ = ("future", "loop", "timer", "woken")

    def __init__(self, run_id: int, poll_interval: float) -> None:
        super().__init__(run_id, poll_interval)
        self.loop = asyncio.get_running_loop()
        self.woken = False
        self.future: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self.loop.call_soon_threadsafe(self.wake_here)

    def wake_here(self) -> None:
        """wake() from the waiter's own loop."""
        self.woken = True
        _settle(self.future)

    def sleep(self, seconds: float) -> asyncio.Future[None]:
        """A future done when the waiter is woken (since `woken` was last cleared) or
        `seconds` have passed; the caller awaits it, then calls stop(). A plain function,
        not a coroutine: no frame of its own per sleeping wait."""
        future = self.future = self.loop.create_future()
        if self.woken:
            future.set_result(None)
        else:
            self.timer = self.loop.call_later(seconds, _settle, future)
        return future

    def stop(self) -> None:
        """After a sleep: its timer goes (a wait woken early leaves no timer behind)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.future = None


def _settle(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


class Waiters:
    """The shared listener of a database's waiters in this process (shared())."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.pid = os.getpid()
        self.connected = threading.Event()  # LISTEN (or, polling only, the connection) is up
        self._lock = threading.Lock()
        # run id -> its waiter, or a set of them when it has several (a set per run would
        # cost 200 bytes a waiter)
        self._waiting: dict[int, Waiter | set[Waiter]] = {}
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._idle_since = time.monotonic()
        # new wait_async waiters of each event loop, for the next watch_runs batch
        self._batches: dict[asyncio.AbstractEventLoop, list[LoopWaiter]] = {}
        self._flushers: set[asyncio.Task[None]] = set()

    # -- the waiters' side ------------------------------------------------------------

    def add(self, waiter: Waiter) -> None:
        with self._lock:
            found = self._waiting.get(waiter.run_id)
            if found is None:
                self._waiting[waiter.run_id] = waiter
            elif isinstance(found, set):
                found.add(waiter)
            else:
                self._waiting[waiter.run_id] = {found, waiter}
            if self._thread is None or not self._thread.is_alive():
                self._closed.clear()
                self._thread = threading.Thread(
                    target=self._run, name="pgqueue-waiters", daemon=True
                )
                self._thread.start()

    def remove(self, waiter: Waiter) -> None:
        with self._lock:
            found = self._waiting.get(waiter.run_id)
            if found is waiter:
                del self._waiting[waiter.run_id]
            elif isinstance(found, set):
                found.discard(waiter)
                if len(found) == 1:
                    self._waiting[waiter.run_id] = found.pop()
            if not self._waiting:
                self._idle_since = time.monotonic()

    def watch_async(self, waiter: LoopWaiter) -> None:
        """Ask for the NOTIFY of `waiter`'s run with the other waits its event loop starts
        meanwhile, in one statement per batch (sql/watch_runs.sql): the batch marks the
        waiter watched, and wakes it if its run has ended (or is gone), if the shared
        listener is down, or if the database could not take the batch (watched False:
        the waiter polls its run and asks again after poll_interval)."""
        waiter.watched = None
        loop = waiter.loop
        with self._lock:
            batch = self._batches.get(loop)
            if batch is not None:
                batch.append(waiter)  # the running flush takes it in its next batch
                return
            self._batches[loop] = [waiter]
        task = loop.create_task(self._flush())
        self._flushers.add(task)
        task.add_done_callback(self._flushers.discard)

    async def _flush(self) -> None:
        """Ask for the batches of the running loop until it starts no more waits."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)  # the waits started in this turn of the loop join the batch
        try:
            while True:
                with self._lock:
                    batch = self._batches.get(loop)
                    if not batch:
                        self._batches.pop(loop, None)
                        return
                    self._batches[loop] = []
                await self._watch_batch(batch)
        finally:
            with self._lock:
                left = self._batches.pop(loop, None) or []
            for w in left:  # cancelled: those not asked for poll
                w.watched = False
                w.wake_here()

    async def _watch_batch(self, batch: list[LoopWaiter]) -> None:
        done = False
        try:
            async with self.database.async_connection() as conn:
                cur = await conn.execute(
                    _sql.query("watch_runs"), {"ids": list({w.run_id for w in batch})}
                )
                row = await cur.fetchone()
            look = set(row[1]) if row is not None else set()
            listening = self.connected.is_set()
            for w in batch:
                w.watched = True
                if not listening or w.run_id in look:
                    w.wake_here()
            done = True
        except _faults.UNAVAILABLE:
            pass  # the waiters poll meanwhile
        except Exception:
            log.exception("waiters: could not watch %d runs; their waiters poll", len(batch))
        finally:
            if not done:
                for w in batch:
                    w.watched = False
                    w.wake_here()

    def close(self) -> None:
        """Stop the thread and close its connection (App.close)."""
        self._closed.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    # -- the thread -------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        while not self._closed.is_set() and not self._idle():
            try:
                self._serve()
                return
            except psycopg.Error as exc:
                self.connected.clear()
                failures += 1
                if failures <= 1 and _faults.lost(exc):
                    delay = 0.0
                else:
                    delay = min(5.0, 0.1 * 2.0**failures)
                    log.warning(
                        "waiters: %s; waiters poll on their own, retrying in %.1fs",
                        _faults.describe(exc),
                        delay,
                    )
                self._closed.wait(delay)
            except Exception:
                self.connected.clear()
                log.exception("waiters: the shared listener failed; waiters poll on their own")
                self._closed.wait(1.0)
        self.connected.clear()

    def _idle(self) -> bool:
        """No waiter for IDLE_EXIT: the thread may go (it is started again if needed)."""
        with self._lock:
            if not self._waiting and time.monotonic() - self._idle_since > IDLE_EXIT:
                self._thread = None
                return True
            return False

    def _serve(self) -> None:
        database = self.database
        listens = database.listens
        # search_path pinned as on the App's pool (opened before: a waiter waits on a run
        # it enqueued or read); a lost connection is a psycopg.Error, retried by _run
        dsn = db.pinned_dsn(database.dsn, database.pooler)
        with psycopg.connect(dsn, **db.connect_kwargs(database.pooler)) as conn:
            if listens:
                conn.execute(f"LISTEN {CHANNEL}")
            self.connected.set()
            self._wake_all()  # whatever finished while nobody listened
            polled = time.monotonic()
            while not self._closed.is_set():
                if self._idle():
                    return
                wait = max(0.0, polled + self._interval() - time.monotonic())
                if listens:
                    for note in conn.notifies(timeout=wait):
                        if note.payload.isascii() and note.payload.isdigit():
                            self._wake(int(note.payload))
                elif self._closed.wait(wait):
                    return
                if time.monotonic() - polled >= self._interval():
                    ids = self._ids()
                    if ids:
                        rows = conn.execute(_sql.query("runs_settled"), {"ids": ids}).fetchall()
                        for (run_id,) in rows:
                            self._wake(run_id)
                    polled = time.monotonic()

    def _interval(self) -> float:
        with self._lock:
            asked = min((w.poll_interval for w in self._all()), default=1.0)
        return max(POLL_MIN, asked)

    def _ids(self) -> list[int]:
        with self._lock:
            return list(self._waiting)

    def _all(self) -> list[Waiter]:
        """Every waiter (under the lock)."""
        return [w for ws in self._waiting.values() for w in _each(ws)]

    def _wake(self, run_id: int) -> None:
        with self._lock:
            found = _each(self._waiting.get(run_id))
        for w in found:
            w.wake()

    def _wake_all(self) -> None:
        with self._lock:
            found = self._all()
        for w in found:
            w.wake()


def _each(found: Waiter | set[Waiter] | None) -> list[Waiter]:
    if found is None:
        return []
    return list(found) if isinstance(found, set) else [found]


def shared(database: Database) -> Waiters:
    """The Waiters of `database` in this process (a forked child gets its own)."""
    current: Any = database.waiters
    if current is None or current.pid != os.getpid():
        with database.lock:
            current = database.waiters
            if current is None or current.pid != os.getpid():
                current = database.waiters = Waiters(database)
    assert isinstance(current, Waiters)
    return current
