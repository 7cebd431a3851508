"""OpenTelemetry tracing for pgqueue: `pip install 'pgqueue-jobs[otel]'`, then

    from pgqueue.contrib.otel import instrument
    instrument(app)

in every process that enqueues or runs work (the producer and the worker). An enqueue
makes a span `pgqueue.enqueue <task>` (kind PRODUCER) and stores its W3C trace context
in the runs (pgqueue.runs.headers); each attempt of a run runs inside a span
`pgqueue.run <task>` (kind CONSUMER) whose parent is that enqueue span, so a trace shows
the request that enqueued the work and every attempt of it, however many workers and
machines it took. Spans the task makes itself (HTTP calls, queries) are children of its
attempt span; a run enqueued by a task (a workflow's child) joins the same trace.

The trace context goes through OpenTelemetry's configured propagator (by default W3C
`traceparent` and `tracestate`, plus baggage). Spans go to the tracer provider you set up
(the global one unless `tracer_provider=` is given): pgqueue exports nothing itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "pgqueue.contrib.otel needs OpenTelemetry: pip install 'pgqueue-jobs[otel]'"
    ) from exc

from pgqueue.states import RunState

if TYPE_CHECKING:
    from pgqueue._tracing import Traced
    from pgqueue.runs.handle import RunHandle
    from pgqueue.tasks.task import RunRow
    from pgqueue.worker.records import Held, Outcome

__all__ = ["OtelTracing", "instrument", "uninstrument"]

T = TypeVar("T", bound="Traced")  # an App

SYSTEM = "pgqueue"
SCOPE = "pgqueue"
_FAILED = RunState.FAILED.value
_SCHEDULED = RunState.SCHEDULED.value


def instrument(app: T, *, tracer_provider: trace.TracerProvider | None = None) -> T:
    """Trace `app`'s enqueues and attempts from now on; returns `app`."""
    app.tracing = OtelTracing(trace.get_tracer(SCOPE, tracer_provider=tracer_provider))
    return app


def uninstrument(app: Traced) -> None:
    app.tracing = None


class _Enqueue:
    """An enqueue's span while its runs are inserted (pgqueue._tracing.TracedEnqueue)."""

    __slots__ = ("headers", "span")

    def __init__(self, span: trace.Span, headers: str | None) -> None:
        self.span = span
        self.headers = headers

    def __call__(self, handles: list[RunHandle]) -> list[RunHandle]:
        if len(handles) == 1:
            self.span.set_attribute("pgqueue.run_id", handles[0].id)
        return handles


class _Attempt:
    """An attempt's span (pgqueue._tracing.AttemptSpan)."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def ended(self, outcome: Outcome | None) -> Outcome | None:
        span = self.span
        if outcome is None:
            # lease lost, canceled, released at shutdown, or timed out (written apart)
            span.set_attribute("pgqueue.outcome", "none")
            return outcome
        span.set_attribute("pgqueue.outcome", outcome.state)
        if outcome.error is not None and outcome.state in (_FAILED, _SCHEDULED):
            kind = outcome.error_kind or "error"
            span.set_attribute("pgqueue.error_kind", kind)
            exc_type, _, message = outcome.error.partition(": ")
            attributes = {
                "exception.type": exc_type if message else kind,
                "exception.message": message or outcome.error,
            }
            if outcome.traceback:
                attributes["exception.stacktrace"] = outcome.traceback
            span.add_event("exception", attributes)
            span.set_status(Status(StatusCode.ERROR, outcome.error))
        return outcome


class OtelTracing:
    """app.tracing with OpenTelemetry (pgqueue._tracing.Tracing)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    @contextmanager
    def enqueue(self, rows: Sequence[RunRow]) -> Iterator[_Enqueue]:
        first = rows[0]
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.destination.name": first.queue,
            "pgqueue.task": first.task,
        }
        if len(rows) > 1:
            attributes["messaging.batch.message_count"] = len(rows)
        with self.tracer.start_as_current_span(
            f"pgqueue.enqueue {first.task}", kind=SpanKind.PRODUCER, attributes=attributes
        ) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            yield _Enqueue(span, json.dumps(carrier) if carrier else None)

    def timed_out(self, held: Held, outcome: Outcome) -> None:
        """Nothing more: the attempt's span records the outcome `none`."""

    @contextmanager
    def attempt(self, held: Held) -> Iterator[_Attempt]:
        row = held.row
        parent = propagate.extract(row.headers) if row.headers else None
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.destination.name": row.queue,
            "pgqueue.task": row.task,
            "pgqueue.run_id": row.id,
            "pgqueue.attempt": row.attempt,
            "pgqueue.max_attempts": row.max_attempts,
        }
        # Failures are recorded from the attempt's outcome (_Attempt.ended): the task's
        # exception never leaves the attempt.
        with self.tracer.start_as_current_span(
            f"pgqueue.run {row.task}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield _Attempt(span)
