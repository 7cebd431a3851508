"""What a running task can know about itself and, in a workflow, its durable API."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pgqueue.runs import RunHandle
    from pgqueue.tasks import Task
    from pgqueue.workflows import Durable


@dataclass
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
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _durable: Durable | None = field(default=None, repr=False)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Sleep up to `timeout` seconds, waking early (and returning True) if cancelled."""
        return self._cancel.wait(timeout)

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
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        self.durable.sleep_until(name, {"seconds": float(seconds)})

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

    def spawn(self, name: str, task: Task[Any, Any], /, *args: Any, **kwargs: Any) -> RunHandle:
        """Start `task` as a child run without waiting. Idempotent per run and name."""
        return self.durable.spawn(name, task, args, kwargs)
