"""A run as Python sees it: the Run record, read from a row of pgqueue.runs. It imports
nothing of pgqueue but the states, so that any module (errors included) can name it."""

from __future__ import annotations

import uuid
from dataclasses import MISSING, dataclass, fields
from datetime import datetime
from typing import Any

from pgqueue.states import TERMINAL_STATES


@dataclass(frozen=True)
class Run:
    id: int
    task: str
    queue: str
    state: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    result: Any
    error: str | None
    attempt: int
    max_attempts: int
    timeout_seconds: float | None
    group_key: str | None
    idempotency_key: str | None
    parent_id: int | None
    run_at: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    worker_id: uuid.UUID | None
    lease_expires_at: datetime | None
    # {done, total, message, at} of the latest ctx.progress() report
    progress: dict[str, Any] | None = None
    cancel_reason: str | None = None  # app.cancel(id, reason=...)
    # dependencies (task.options(after=...)): the runs it waits for, what a failed one
    # does ("cancel" or "run"), and while it waits, those not finished yet
    after: list[int] | None = None
    on_dependency_failure: str | None = None
    waiting_for: list[int] | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Run:
        # a field with a default that the query does not read (the dependencies of
        # list_runs.sql's runs) takes its default
        values = {
            f.name: row[f.name] if f.name in row or f.default is MISSING else f.default
            for f in fields(cls)
        }
        values["group_key"] = values["group_key"] or None  # '' is the default group
        return cls(**values)

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, uuid.UUID):
                value = str(value)
            out[f.name] = value
        return out
