"""Sentry error reporting for pgqueue's workers: `pip install 'pgqueue-jobs[sentry]'`, then

    import sentry_sdk
    from pgqueue.contrib.sentry import instrument

    sentry_sdk.init(dsn=...)
    instrument(app)

in the worker's process (the module `pgqueue worker --app` imports). Each failed attempt
(an exception, a timeout or a non-retryable error; retried or final) becomes one Sentry
event: the exception with its traceback (a timeout has none), tagged `pgqueue.run_id`,
`pgqueue.task`, `pgqueue.queue` and `pgqueue.attempt`, plus `pgqueue.state` (`scheduled`:
will be retried, `failed`: for good) and `pgqueue.error_kind`. Attempts that succeed, wait
or are canceled send nothing.

With `pgqueue.contrib.otel` as well, call its `instrument(app)` first: this one keeps the
tracing it finds and adds its reports to it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, TypeVar

try:
    import sentry_sdk
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "pgqueue.contrib.sentry needs sentry-sdk: pip install 'pgqueue-jobs[sentry]'"
    ) from exc

from pgqueue.states import RunState

if TYPE_CHECKING:
    from pgqueue._tracing import AttemptSpan, Traced, TracedEnqueue, Tracing
    from pgqueue.runs.handle import RunHandle
    from pgqueue.tasks.task import RunRow
    from pgqueue.worker.records import Held, Outcome

__all__ = ["SentryReporting", "instrument", "uninstrument"]

T = TypeVar("T", bound="Traced")  # an App

_REPORTED = (RunState.FAILED.value, RunState.SCHEDULED.value)


def instrument(app: T) -> T:
    """Report `app`'s failed attempts to Sentry from now on; returns `app`."""
    if not isinstance(app.tracing, SentryReporting):
        app.tracing = SentryReporting(app.tracing)
    return app


def uninstrument(app: Traced) -> None:
    """Stop reporting; the tracing it wrapped (if any) stays."""
    if isinstance(app.tracing, SentryReporting):
        app.tracing = app.tracing.inner


class _NoEnqueueSpan:
    __slots__ = ()
    headers: str | None = None

    def __call__(self, handles: list[RunHandle]) -> list[RunHandle]:
        return handles


class _Attempt:
    """Reports the attempt's outcome if it is a failure (pgqueue._tracing.AttemptSpan)."""

    __slots__ = ("held", "inner")

    def __init__(self, held: Held, inner: AttemptSpan | None) -> None:
        self.held = held
        self.inner = inner

    def ended(self, outcome: Outcome | None) -> Outcome | None:
        if self.inner is not None:
            outcome = self.inner.ended(outcome)
        if outcome is not None and outcome.error is not None and outcome.state in _REPORTED:
            report(self.held, outcome)
        return outcome


def report(held: Held, outcome: Outcome) -> None:
    """One Sentry event for the failed attempt `outcome` of `held`."""
    row = held.row
    with sentry_sdk.new_scope() as scope:
        scope.set_tag("pgqueue.run_id", str(row.id))
        scope.set_tag("pgqueue.task", row.task)
        scope.set_tag("pgqueue.queue", row.queue)
        scope.set_tag("pgqueue.attempt", str(row.attempt))
        scope.set_tag("pgqueue.state", outcome.state)
        scope.set_tag("pgqueue.error_kind", outcome.error_kind or "error")
        scope.set_context(
            "pgqueue",
            {
                "run_id": row.id,
                "task": row.task,
                "queue": row.queue,
                "attempt": row.attempt,
                "max_attempts": row.max_attempts,
                "error": outcome.error,
            },
        )
        scope.set_transaction_name(row.task)
        if outcome.exception is not None:
            sentry_sdk.capture_exception(outcome.exception)
        else:  # a failure pgqueue made up (an unknown task): its message, no traceback
            sentry_sdk.capture_message(outcome.error or "failed", level="error")


class SentryReporting:
    """app.tracing that reports failed attempts to Sentry, around the tracing it found
    (pgqueue._tracing.Tracing)."""

    def __init__(self, inner: Tracing | None = None) -> None:
        self.inner = inner

    def enqueue(self, rows: Sequence[RunRow]) -> AbstractContextManager[TracedEnqueue]:
        if self.inner is not None:
            return self.inner.enqueue(rows)
        return nullcontext(_NoEnqueueSpan())

    def timed_out(self, held: Held, outcome: Outcome) -> None:
        if self.inner is not None:
            self.inner.timed_out(held, outcome)
        report(held, outcome)

    @contextmanager
    def attempt(self, held: Held) -> Iterator[_Attempt]:
        if self.inner is None:
            yield _Attempt(held, None)
            return
        with self.inner.attempt(held) as span:
            yield _Attempt(held, span)
