"""The RunHandle an enqueue returns: a run's id, and a way to read it and wait for its
outcome (the Run record is pgqueue.runs.run's)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgqueue.db import faults as _faults
from pgqueue.db import sql as _sql
from pgqueue.errors import RunCanceled, RunFailed
from pgqueue.runs import read
from pgqueue.runs import waiters as _waiters
from pgqueue.runs.run import Run
from pgqueue.states import RunState

if TYPE_CHECKING:
    from pgqueue.db.database import Database

PENDING: Any = object()  # outcome() of a run that has not finished


@dataclass(frozen=True)
class RunHandle:
    """What enqueue returns: the run's id, and a way to wait for its outcome."""

    id: int
    database: Database  # RunHandle(run_id, app) takes the App's
    created: bool = True

    def __post_init__(self) -> None:
        # a handle made by hand from an App (not by an enqueue): the App's database
        database = getattr(self.database, "database", None)
        if database is not None:
            object.__setattr__(self, "database", database)

    @classmethod
    def many(cls, ids: Iterable[int], database: Database) -> list[RunHandle]:
        """Handles of freshly created runs, for a batch: the same objects the constructor
        makes, without its three object.__setattr__ calls per handle (a frozen
        dataclass's __init__), a third of what handing back a bulk enqueue cost."""
        new = object.__new__
        out: list[RunHandle] = []
        append = out.append
        for run_id in ids:
            handle = new(cls)
            values = handle.__dict__
            values["id"] = run_id
            values["database"] = database
            append(handle)
        return out

    def get(self) -> Run:
        with self.database.connection() as c:
            return read.get_run(c, self.id)

    async def get_async(self) -> Run:
        async with self.database.async_connection() as c:
            return await read.get_run_async(c, self.id)

    def wait(self, timeout: float | None = None, poll_interval: float = 1.0) -> Any:
        """Block until the run ends; return its result, or raise RunFailed, RunCanceled or
        TimeoutError. Woken by the process's shared listener (pgqueue.runs.waiters: one
        connection for every waiter), which polls every poll_interval as a backstop. A
        database that cannot answer for a while (a lost connection, a failover, a
        standby) makes it look again every poll_interval until its timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        event, wake = _waiters.thread_waker()
        waiters = _waiters.shared(self.database)
        waiter = _waiters.Waiter(self.id, poll_interval, wake)
        waiters.add(waiter)
        watched = not self.database.listens  # nothing to ask for: no NOTIFY would come
        try:
            waiters.connected.wait(_waiters.CONNECT_WAIT)
            while True:
                event.clear()
                state = "unknown: the database did not answer"
                watched = watched or self._watch()
                try:
                    run = self.get()
                    if (result := outcome(run)) is not PENDING:
                        return result
                    state = run.state
                except _faults.UNAVAILABLE:
                    pass  # looked at again after poll_interval
                left = _left(deadline, timeout, state, self.id)
                listened = watched and waiters.connected.is_set()
                event.wait(left if listened else min(left, poll_interval))
        finally:
            waiters.remove(waiter)

    async def wait_async(self, timeout: float | None = None, poll_interval: float = 1.0) -> Any:
        """wait() for asyncio code: the same shared listener, backstop poll and outcome."""
        deadline = None if timeout is None else time.monotonic() + timeout
        event, wake = _waiters.loop_waker()
        waiters = _waiters.shared(self.database)
        waiter = _waiters.Waiter(self.id, poll_interval, wake)
        waiters.add(waiter)
        watched = not self.database.listens
        try:
            if not waiters.connected.is_set():
                await asyncio.to_thread(waiters.connected.wait, _waiters.CONNECT_WAIT)
            while True:
                event.clear()
                state = "unknown: the database did not answer"
                watched = watched or await self._watch_async()
                try:
                    run = await self.get_async()
                    if (result := outcome(run)) is not PENDING:
                        return result
                    state = run.state
                except _faults.UNAVAILABLE:
                    pass
                left = _left(deadline, timeout, state, self.id)
                if not (watched and waiters.connected.is_set()):
                    left = min(left, poll_interval)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), left)
        finally:
            waiters.remove(waiter)

    def _watch(self) -> bool:
        """Ask for a NOTIFY when the run ends (sql/watch_run.sql); False if the database
        could not take it now (a standby, or no connection): the waiter polls meanwhile."""
        try:
            with self.database.connection() as conn:
                conn.execute(_sql.query("watch_run"), {"id": self.id})
        except _faults.UNAVAILABLE:
            return False
        return True

    async def _watch_async(self) -> bool:
        try:
            async with self.database.async_connection() as conn:
                await conn.execute(_sql.query("watch_run"), {"id": self.id})
        except _faults.UNAVAILABLE:
            return False
        return True


def _left(deadline: float | None, timeout: float | None, state: str, run_id: int) -> float:
    """Seconds a waiter may still wait, or the TimeoutError of one that waited enough."""
    if deadline is None:
        return _FOREVER
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"run {run_id} still {state} after {timeout}s")
    return left


_FOREVER = 3600.0  # a wait without a deadline looks again at least this often


def outcome(run: Run) -> Any:
    """A finished run's result, or RunFailed / RunCanceled; PENDING if it has not finished."""
    if run.state == RunState.SUCCEEDED:
        return run.result
    if run.state == RunState.FAILED:
        raise RunFailed(run)
    if run.state == RunState.CANCELED:
        raise RunCanceled(run)
    return PENDING
