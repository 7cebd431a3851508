"""Run transitions as this worker sees them: one structured INFO line each (logger
"pgqueue.worker"; with `--log-format json` its fields become JSON keys), the worker's
stats of written outcomes and, when the worker serves metrics, the matching counters and
histograms."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING

from pgqueue.states import RunState
from pgqueue.worker.records import Held, Outcome

if TYPE_CHECKING:
    from pgqueue.ops.metrics import WorkerMetrics

log = logging.getLogger("pgqueue.worker")

# Per-run code: plain strings bound once (see attempt.py).
_FINISHED_BY_ATTEMPT = (RunState.SUCCEEDED.value, RunState.FAILED.value)
_SCHEDULED = RunState.SCHEDULED.value


def event_of(outcome: Outcome, written: bool) -> str:
    """started | succeeded | failed | retried | deferred | rejected."""
    if not written:
        return "rejected"  # the lease was lost meanwhile: the outcome was fenced out
    if outcome.state in _FINISHED_BY_ATTEMPT:
        return outcome.state
    if outcome.state == _SCHEDULED and outcome.error_kind is not None:
        return "retried"
    return "deferred"  # RetryAfter, a durable sleep or wait, a child call


class Transitions:
    """Counts written outcomes in `stats` (by state, "fenced" for those the lease fenced
    out), and into `metrics` (None: the worker serves none)."""

    def __init__(self, metrics: WorkerMetrics | None, stats: Counter[str]) -> None:
        self.metrics = metrics
        self.stats = stats
        self._started: dict[Held, float] = {}

    def _quiet(self) -> bool:
        """Nobody reads transitions: no metrics, and INFO logs off (the default)."""
        return self.metrics is None and not log.isEnabledFor(logging.INFO)

    def started(self, held: Held) -> None:
        if self._quiet():
            return  # the hot path of a worker that neither logs runs nor serves metrics
        row = held.row
        self._started[held] = time.monotonic()
        pickup = max(0.0, float(row.pickup_seconds or 0.0))
        if self.metrics is not None:
            self.metrics.started.labels(row.queue, row.task).inc()
            self.metrics.pickup.labels(row.queue).observe(pickup)
        if not log.isEnabledFor(logging.INFO):
            return  # no formatting cost on the hot path when nobody reads it
        log.info(
            "run %s %s (queue %s) attempt %s/%s started",
            held.id,
            row.task,
            row.queue,
            row.attempt,
            row.max_attempts,
            extra={
                "event": "started",
                "run_id": held.id,
                "task": row.task,
                "queue": row.queue,
                "attempt": row.attempt,
                "state": RunState.RUNNING.value,
                "pickup_ms": round(pickup * 1000, 1),
            },
        )

    def written(self, held: Held, outcome: Outcome, written: bool) -> None:
        """The attempt's outcome was written (or fenced out: the lease was lost)."""
        self.stats[outcome.state if written else "fenced"] += 1
        self.finished(held, outcome, written)

    def finished(self, held: Held, outcome: Outcome | None, written: bool) -> None:
        """After the attempt's outcome was written (or fenced out); outcome None: the
        worker wrote nothing (lease lost, run canceled, or released at shutdown)."""
        if self._quiet():
            if self._started:  # logging was on when it started
                self._started.pop(held, None)
            return
        row = held.row
        began = self._started.pop(held, None)
        seconds = time.monotonic() - began if began is not None else 0.0
        if outcome is None:
            if not held.released:
                return  # lost or canceled: Executor.lose already logged it
            event, state = "released", RunState.QUEUED.value
        else:
            event, state = event_of(outcome, written), outcome.state
        self._count(held, outcome, written, event, seconds)
        if not log.isEnabledFor(logging.INFO):
            return
        fields = {
            "event": event,
            "run_id": held.id,
            "task": row.task,
            "queue": row.queue,
            "attempt": row.attempt,
            "state": state,
            "duration_ms": round(seconds * 1000, 1),
        }
        detail = ""
        if outcome is not None and outcome.error:
            fields["error"] = outcome.error
            detail = f": {outcome.error.splitlines()[0] if outcome.error else ''}"
        log.info(
            "run %s %s (queue %s) attempt %s %s -> %s in %.0fms%s",
            held.id,
            row.task,
            row.queue,
            row.attempt,
            event,
            state,
            seconds * 1000,
            detail,
            extra=fields,
        )

    def _count(
        self, held: Held, outcome: Outcome | None, written: bool, event: str, seconds: float
    ) -> None:
        m = self.metrics
        row = held.row
        if m is None or outcome is None or not written:
            return
        labels = (row.queue, row.task)
        m.duration.labels(*labels).observe(seconds)
        counter = {"succeeded": m.succeeded, "failed": m.failed, "retried": m.retried}.get(event)
        if counter is not None:
            counter.labels(*labels).inc()
