"""The RunHandle an enqueue returns: a run's id, and a way to read it and wait for its
outcome (the Run record is pgqueue.runs.run's). `RunHandle[R]` is generic in the task's
return type: `send_email.enqueue(...)` is a `RunHandle[None]`, so `wait()` has the
task's type for a type checker; a bare `RunHandle` (one made by hand, or by name) is
`RunHandle[Any]`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, cast

from pgqueue.db import faults as _faults
from pgqueue.db import sql as _sql
from pgqueue.errors import RunCanceled, RunFailed
from pgqueue.runs import read
from pgqueue.runs import waiters as _waiters
from pgqueue.runs.run import Run
from pgqueue.states import RunState

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    from pgqueue.db.database import Database

    # A handle's result type; a bare RunHandle is RunHandle[Any], also under --strict.
    # typing.TypeVar takes default= only from Python 3.13: type checkers read this one,
    # the interpreter the one below (a default changes nothing at run time).
    R = TypeVar("R", default=Any)
else:
    from typing import TypeVar

    R = TypeVar("R")

PENDING: Any = object()  # outcome() of a run that has not finished


class HoldsDatabase(Protocol):
    """What holds a Database: an App (`RunHandle(run_id, app)`)."""

    @property
    def database(self) -> Database: ...


@dataclass(frozen=True, init=False)
class RunHandle(Generic[R]):
    """What enqueue returns: the run's id, and a way to wait for its outcome. `R` is the
    type of the task's result (what `wait()` returns): the return type of the task's
    function, or of its coroutine for an `async def` task."""

    id: int
    database: Database
    created: bool = True

    def __init__(self, id: int, database: Database | HoldsDatabase, created: bool = True) -> None:
        # a handle made by hand from an App (not by an enqueue) takes the App's database
        held = getattr(database, "database", None)
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "database", database if held is None else held)
        object.__setattr__(self, "created", created)

    @classmethod
    def many(cls, ids: Iterable[int], database: Database) -> list[RunHandle[Any]]:
        """Handles of freshly created runs, for a batch: the same objects the constructor
        makes, without its three object.__setattr__ calls per handle (a frozen
        dataclass sets its fields so), a third of what handing back a bulk enqueue cost."""
        new = object.__new__
        out: list[RunHandle[Any]] = []
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

    def wait(self, timeout: float | None = None, poll_interval: float = 1.0) -> R:
        """Block until the run ends; return its result (the task's return value as JSON
        gave it back: a tuple comes back a list), or raise RunFailed, RunCanceled or
        TimeoutError. Woken by the process's shared listener (pgqueue.runs.waiters: one
        connection for every waiter), which polls every poll_interval as a backstop. A
        database that cannot answer for a while (a lost connection, a failover, a
        standby) makes it look again every poll_interval until its timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        waiters = _waiters.shared(self.database)
        waiter = _waiters.ThreadWaiter(self.id, poll_interval)
        event = waiter.event
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
                        return cast("R", result)
                    state = run.state
                except _faults.UNAVAILABLE:
                    pass  # looked at again after poll_interval
                left = _left(deadline, timeout, state, self.id)
                listened = watched and waiters.connected.is_set()
                event.wait(left if listened else min(left, poll_interval))
        finally:
            waiters.remove(waiter)

    async def wait_async(self, timeout: float | None = None, poll_interval: float = 1.0) -> R:
        """wait() for asyncio code: the same shared listener, backstop poll and outcome.
        Its start costs no round trip of its own: the waits an event loop starts together
        ask for their runs' NOTIFY, and learn which runs have ended already, in one
        statement (Waiters.watch_async); a wait reads its run only when woken, at its
        backstop poll, or at its timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        waiters = _waiters.shared(self.database)
        waiter = _waiters.LoopWaiter(self.id, poll_interval)
        waiters.add(waiter)
        listens = self.database.listens  # else nothing to ask for: no NOTIFY would come
        asked = 0.0
        try:
            if not waiters.connected.is_set():
                await asyncio.to_thread(waiters.connected.wait, _waiters.CONNECT_WAIT)
            if listens:
                waiters.watch_async(waiter)
                asked = time.monotonic()
            look = not listens
            state = "unknown: the database did not answer"
            while True:
                waiter.woken = False
                # a wait reads its run when woken, at a poll, and at its deadline (also a
                # deadline already past: a finished run is a result, not a timeout)
                if look or (deadline is not None and time.monotonic() >= deadline):
                    state = "unknown: the database did not answer"
                    try:
                        # the state only: a waiter holds no Run while it waits
                        result, state = _ended(await self.get_async())
                        if result is not PENDING:
                            return cast("R", result)
                    except _faults.UNAVAILABLE:
                        pass
                look = True
                # asked again after a failed batch, but not at once: at the next poll
                again = waiter.watched is False and time.monotonic() - asked >= poll_interval
                if listens and again:
                    waiters.watch_async(waiter)
                    asked = time.monotonic()
                left = _left(deadline, timeout, state, self.id)
                # a batch in flight wakes the waiter or marks it watched; a waiter not
                # watched, or without the shared listener, polls
                if waiter.watched is not None and not (
                    (waiter.watched or not listens) and waiters.connected.is_set()
                ):
                    left = min(left, poll_interval)
                try:
                    await waiter.sleep(left)  # no task of its own per wait
                finally:
                    waiter.stop()
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


def _left(deadline: float | None, timeout: float | None, state: str, run_id: int) -> float:
    """Seconds a waiter may still wait, or the TimeoutError of one that waited enough."""
    if deadline is None:
        return _FOREVER
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"run {run_id} still {state} after {timeout}s")
    return left


_FOREVER = 3600.0  # a wait without a deadline looks again at least this often


def _ended(run: Run) -> tuple[Any, str]:
    """outcome(run) and the run's state."""
    return outcome(run), run.state


def outcome(run: Run) -> Any:
    """A finished run's result, or RunFailed / RunCanceled; PENDING if it has not finished."""
    if run.state == RunState.SUCCEEDED:
        return run.result
    if run.state == RunState.FAILED:
        raise RunFailed(run)
    if run.state == RunState.CANCELED:
        raise RunCanceled(run)
    return PENDING
