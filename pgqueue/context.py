"""What a running task can know about itself and, in a workflow, its durable API."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pgqueue._checks import check_seconds

if TYPE_CHECKING:
    from pgqueue.runs import RunHandle
    from pgqueue.tasks import Task
    from pgqueue.workflows import Durable

_CANCEL_LOCK = threading.Lock()  # shared: taken only to cancel or to wait for a cancel


@dataclass(slots=True)
class Context:
    """Passed first to `@app.workflow` functions, and to on_success/on_failure hooks.

    `cancelled` turns true when the run was canceled, timed out, lost its lease or the
    worker is shutting down past its grace period: long sync tasks should check it.
    """

    run_id: int
    task: str
    queue: str
    attempt: int
    max_attempts: int
    args: list[Any]
    kwargs: dict[str, Any]
    _durable: Durable | None = field(default=None, repr=False)
    # Cancellation: a flag, and an Event made only for a run that waits on it (an Event
    # costs a Lock and a Condition; most runs never wait, and a worker makes one Context
    # per run). Both are set under _CANCEL_LOCK, so a waiter never misses the cancel.
    _cancelled: bool = field(default=False, repr=False)
    _cancel_event: threading.Event | None = field(default=None, repr=False)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Sleep up to `timeout` seconds, waking early (and returning True) if cancelled."""
        with _CANCEL_LOCK:
            if self._cancelled:
                return True
            event = self._cancel_event
            if event is None:
                event = self._cancel_event = threading.Event()
        return event.wait(timeout)

    def _cancel(self) -> None:
        """Turn `cancelled` true and wake whoever waits in wait_cancelled (any thread)."""
        with _CANCEL_LOCK:
            self._cancelled = True
            event = self._cancel_event
        if event is not None:
            event.set()

    @property
    def durable(self) -> Durable:
        if self._durable is None:
            raise RuntimeError(
                "durable operations (step, sleep, wait_for_event, call, spawn) "
                "are only available in runs of @app.workflow tasks"
            )
        return self._durable

    def step(self, name: str, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` once for this run and store its JSON result; on
        later attempts return the stored result without calling `fn`."""
        return self.durable.step(name, fn, args, kwargs)

    def sleep(self, name: str, seconds: float | timedelta) -> None:
        """Sleep durably: the worker is freed and the run resumes after `seconds`."""
        seconds = check_seconds("sleep", seconds, zero=True)
        self.durable.sleep_until(name, {"seconds": seconds})

    def sleep_until(self, name: str, when: datetime) -> None:
        if when.tzinfo is None:
            raise ValueError("sleep_until needs a timezone-aware datetime")
        self.durable.sleep_until(name, {"until": when.isoformat()})

    def wait_for_event(
        self, name: str, *, event: str, key: str | None = None, timeout: float | None = None
    ) -> Any:
        """Wait durably for `event` (with `key`) emitted after the wait began; return its
        payload, or None after `timeout` seconds."""
        return self.durable.wait_for_event(name, event, key, timeout)

    def call(self, name: str, task: Task[Any, Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run `task` as a child run and wait durably for its result (ChildFailed if it
        fails). Idempotent per parent run and step name."""
        return self.durable.call(name, task, args, kwargs)

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
        from pgqueue._fanout import map_children

        return map_children(self.durable, name, task, items, return_exceptions)

    def spawn(self, name: str, task: Task[Any, Any], /, *args: Any, **kwargs: Any) -> RunHandle:
        """Start `task` as a child run without waiting. Idempotent per run and name."""
        return self.durable.spawn(name, task, args, kwargs)
