"""What App and the worker call when an app is traced (`app.tracing`, installed by
pgqueue.contrib.otel.instrument): a span around each enqueue, whose trace context is
stored with the runs (pgqueue.runs.headers), and a span around each attempt. The protocol
keeps OpenTelemetry out of pgqueue's core: with `app.tracing` None (the default), nothing
here is imported or called, and the only cost is one `is not None` test per enqueue and
per attempt."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pgqueue.runs.handle import RunHandle
    from pgqueue.tasks.task import RunRow
    from pgqueue.worker.records import Held, Outcome


class TracedEnqueue(Protocol):
    """One enqueue's span, open while its runs are inserted."""

    # the JSON object text stored as the runs' headers (the span's trace context)
    headers: str | None

    def __call__(self, handles: list[RunHandle]) -> list[RunHandle]:
        """Note the inserted runs on the span; returns `handles`."""


class AttemptSpan(Protocol):
    """One attempt's span, current while the task runs."""

    def ended(self, outcome: Outcome | None) -> Outcome | None:
        """Record what the attempt came to (None: nothing written); returns `outcome`."""


class Tracing(Protocol):
    def enqueue(self, rows: Sequence[RunRow]) -> AbstractContextManager[TracedEnqueue]: ...

    def attempt(self, held: Held) -> AbstractContextManager[AttemptSpan]: ...

    def timed_out(self, held: Held, outcome: Outcome) -> None:
        """An attempt ran past its task's timeout: the worker writes `outcome` (its
        failure) now, apart from the attempt, whose span gets no outcome (None)."""


class Traced(Protocol):
    """What pgqueue.contrib.otel and .sentry instrument: an App, through its `tracing`."""

    tracing: Tracing | None
