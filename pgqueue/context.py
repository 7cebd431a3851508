"""What a running task can know about itself (and, for workflows, the durable API)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


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

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Sleep up to `timeout` seconds, waking early (and returning True) if cancelled."""
        return self._cancel.wait(timeout)
