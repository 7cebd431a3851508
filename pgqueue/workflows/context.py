"""What a running task can know about itself and, in a workflow, its durable API.

Every attempt runs with its Context as `pgqueue.current()` (a context variable: set in the
worker thread of a sync task, in the asyncio task of an async one, and copied wherever
the task's code copies its context, e.g. `asyncio.to_thread`)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from pgqueue.enqueue.checks import check_due, check_seconds
from pgqueue.errors import ChildFailed

if TYPE_CHECKING:
    from pgqueue.db.database import Database
    from pgqueue.runs.handle import RunHandle
    from pgqueue.runs.progress import Progress
    from pgqueue.tasks.task import Task
    from pgqueue.workflows.durable import Durable

T = TypeVar("T")  # what a step's function returns, or a child run's task

_CANCEL_LOCK = threading.Lock()  # shared: taken only to cancel or to wait for a cancel
CURRENT: contextvars.ContextVar[Context] = contextvars.ContextVar("pgqueue.current")


def current() -> Context:
    """The Context of the attempt whose code is running (any task, plain or workflow,
    sync or async, and its hooks). RuntimeError outside a run."""
    try:
        return CURRENT.get()
    except LookupError:
        raise RuntimeError(
            "pgqueue.current() was called outside a run: only a task's code (and its "
            "hooks) running in a worker, or under pgqueue.testing.eager, has a Context"
        ) from None


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def call_as(ctx: Context, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) with `ctx` as pgqueue.current() (in a worker thread)."""
    token = CURRENT.set(ctx)
    try:
        return fn(*args, **kwargs)
    finally:
        CURRENT.reset(token)
        writer = ctx.progress_writer
        if writer is not None:
            writer.flush()


@dataclass(slots=True)
class Context:
    """The running attempt: `pgqueue.current()` in any task, passed first to
    `@app.workflow` functions and to the on_success/on_failure/on_retry hooks.

    `cancelled` turns true when the run was canceled, timed out, lost its lease or the
    worker is shutting down past its grace period: long sync tasks should check it (an
    async task is cancelled for real, at its next await).
    """

    run_id: int
    task: str
    queue: str
    attempt: int
    max_attempts: int
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int = 0
    group: str | None = None
    _database: Database | None = field(default=None, repr=False)
    _lease_token: str | None = field(default=None, repr=False)
    _durable: Durable | None = field(default=None, repr=False)
    _progress: Progress | None = field(default=None, repr=False)
    # Cancellation: a flag, and an Event made only for a run that waits on it (an Event
    # costs a Lock and a Condition; most runs never wait, and a worker makes one Context
    # per run). Both are set under _CANCEL_LOCK, so a waiter never misses the cancel.
    _cancelled: bool = field(default=False, repr=False)
    _cancel_event: threading.Event | None = field(default=None, repr=False)
    _worker_id: uuid.UUID | None = field(default=None, repr=False)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def database(self) -> Database | None:
        """The database of the App running this attempt; None when no worker runs it
        (pgqueue.testing's eager runs)."""
        return self._database

    @property
    def worker_id(self) -> uuid.UUID | None:
        """The id of the worker running this attempt (as in pgqueue.workers); None when
        the run is not run by a worker (pgqueue.testing's eager runs)."""
        return self._worker_id

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Sleep up to `timeout` seconds, waking early (and returning True) if cancelled.
        For sync code: an async task is cancelled for real (CancelledError at its next
        await), so it sleeps with `await asyncio.sleep(...)` instead."""
        if _on_event_loop():
            raise RuntimeError(
                "ctx.wait_cancelled() would block the event loop: an async task is "
                "cancelled for real (CancelledError), so use `await asyncio.sleep(seconds)` "
                "and check ctx.cancelled if you need to"
            )
        with _CANCEL_LOCK:
            if self._cancelled:
                return True
            event = self._cancel_event
            if event is None:
                event = self._cancel_event = threading.Event()
        return event.wait(timeout)

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report how far the run has got: stored as {done, total, message, at} in
        pgqueue.runs.progress, at most once a second (the latest report wins; the last
        one is written when the attempt ends), and only while this attempt holds the
        run's lease. Shown by `pgqueue runs show` and the dashboard."""
        from pgqueue.runs.progress import Progress, progress_doc

        doc = progress_doc(done, total, message)
        writer = self._progress
        if writer is None:
            writer = self._progress = Progress(self._database, self.run_id, self._lease_token)
        writer.report(doc)

    @property
    def progress_writer(self) -> Progress | None:
        """What writes this attempt's progress reports (None until its first report):
        the worker flushes it when the attempt ends."""
        return self._progress

    @property
    def last_progress(self) -> dict[str, Any] | None:
        """The latest report of this attempt (written or still pending), or None."""
        return None if self._progress is None else self._progress.latest

    def mark_cancelled(self) -> None:
        """Turn `cancelled` true and wake whoever waits in wait_cancelled (any thread)."""
        with _CANCEL_LOCK:
            self._cancelled = True
            event = self._cancel_event
        if event is not None:
            event.set()

    @property
    def durable(self) -> Durable:
        """The stored side of a workflow's attempt (set by the worker before a workflow
        runs); RuntimeError in any other run."""
        if self._durable is None:
            raise RuntimeError(
                "durable operations (step, sleep, wait_for_event, call, spawn) "
                "are only available in runs of @app.workflow tasks"
            )
        return self._durable

    @durable.setter
    def durable(self, durable: Durable) -> None:
        self._durable = durable

    def _sync_durable(self) -> Durable:
        """The Durable of a sync operation, called where it may block."""
        if _on_event_loop():
            raise RuntimeError(
                "a sync durable operation would block the event loop: an `async def` "
                "workflow awaits those of the AsyncContext it receives first "
                "(`await ctx.step(...)`), not those of pgqueue.current()"
            )
        return self.durable

    def step(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> T:
        """Run `fn(*args, **kwargs)` once for this run and store its JSON result; on
        later attempts return the stored result without calling `fn`. Its type is what
        `fn` returns (as JSON gives it back: a tuple comes back a list). With `timeout`,
        TimeoutError if `fn` takes longer (the step fails, and runs again on the next
        attempt; its thread cannot be stopped and is left to finish). `timeout` is the
        step's own option: to pass an argument of that name to `fn`, use a lambda."""
        durable = self._sync_durable()
        if timeout is not None:
            timeout = check_seconds("step timeout", timeout, zero=False)
        result: T = durable.step(durable.unique_name(name), fn, args, kwargs, timeout)
        return result

    def patched(self, change_id: str) -> bool:
        """Whether this run takes the code of a change (`if ctx.patched("send-receipt"):
        ...new code...`): True for a run that reaches this point on code with the patch,
        False for a run whose history went past this point before it existed; the answer
        is recorded, so every replay of the run gets the same. Takes no position among
        the run's operations (docs/workflows.md, Versioning)."""
        durable = self._sync_durable()
        return durable.patched(change_id, durable.next_position())

    def deprecate_patch(self, change_id: str) -> None:
        """Mark the code of patch `change_id` as the only code left (its `if` removed): a
        run still on the code before it fails with NonDeterministic."""
        self._sync_durable().deprecate_patch(change_id)

    def emit_event(
        self,
        name: str,
        event: str,
        *,
        key: str | None = None,
        payload: Any = None,
        delay: float | None = None,
    ) -> int:
        """Emit an event as a step: once per run, whatever the replays (the event and the
        step commit together). Returns the event's id."""
        durable = self._sync_durable()
        return durable.emit_event(durable.unique_name(name), event, key, payload, delay)

    def sleep(self, name: str, seconds: float | timedelta) -> None:
        """Sleep durably: the worker is freed and the run resumes after `seconds`."""
        spec = sleep_spec(seconds)  # checked before anything is named or stored
        durable = self._sync_durable()
        durable.sleep_until(durable.unique_name(name), spec)

    def sleep_until(self, name: str, when: datetime) -> None:
        spec = sleep_until_spec(when)  # checked before anything is named or stored
        durable = self._sync_durable()
        durable.sleep_until(durable.unique_name(name), spec)

    def wait_for_event(
        self, name: str, *, event: str, key: str | None = None, timeout: float | None = None
    ) -> Any:
        """Wait durably for `event` (with `key`) emitted after the wait began; return its
        payload, or None after `timeout` seconds."""
        durable = self._sync_durable()
        return durable.wait_for_event(durable.unique_name(name), event, key, timeout)

    def call(
        self,
        name: str,
        task: Task[Any, T],
        /,
        *args: Any,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> T:
        """Run `task` as a child run and wait durably for its result (ChildFailed if it
        fails). Idempotent per parent run and step name. With `timeout`, TimeoutError
        once the child has not finished that many seconds after this call first began
        (the database's clock, across attempts and crashes): the child is canceled, and
        every later replay raises the same TimeoutError."""
        durable = self._sync_durable()
        result: T = durable.call(durable.unique_name(name), task, args, kwargs, timeout)
        return result

    @overload
    def map(
        self,
        name: str,
        task: Task[Any, T],
        items: Iterable[Any],
        /,
        *,
        return_exceptions: Literal[False] = False,
    ) -> list[T]: ...

    @overload
    def map(
        self,
        name: str,
        task: Task[Any, T],
        items: Iterable[Any],
        /,
        *,
        return_exceptions: bool,
    ) -> list[T | ChildFailed]: ...

    def map(
        self,
        name: str,
        task: Task[Any, Any],
        items: Iterable[Any],
        /,
        *,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """Run `task` once per item as child runs (an item is an args tuple/list, a kwargs
        dict, or the one argument) and wait durably for all; their results in the items'
        order. A failed child raises ChildFailed, or with `return_exceptions=True` takes
        its place in the list. Idempotent per parent run and step name."""
        from pgqueue.workflows.fanout import map_children

        durable = self._sync_durable()
        return map_children(durable, durable.unique_name(name), task, items, return_exceptions)

    def spawn(self, name: str, task: Task[Any, T], /, *args: Any, **kwargs: Any) -> RunHandle[T]:
        """Start `task` as a child run without waiting. Idempotent per run and name."""
        durable = self._sync_durable()
        return durable.spawn(durable.unique_name(name), task, args, kwargs)


def sleep_spec(seconds: float | timedelta) -> dict[str, Any]:
    """What a durable sleep of `seconds` stores (its step's output while it sleeps)."""
    return {"seconds": check_seconds("sleep", seconds, zero=True)}


def sleep_until_spec(when: datetime) -> dict[str, Any]:
    check_due("sleep_until", when)
    return {"until": when.isoformat()}


# Calls a worker's sync call (task, workflow, hook) for a run and returns its result; see
# App.sync_wrappers.
SyncWrapper = Callable[[Context, Callable[[], Any]], Any]
