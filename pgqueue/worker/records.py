"""The worker's records: plain data that the parts hand each other about a run. A claimed
row (`Claimed`), the attempt this worker holds under its lease (`Held`) and what became of
it (`Outcome`). Standard library only (and pgqueue.errors / pgqueue.states): no behaviour
here, so that any part, and pgqueue's tracing protocol, can name them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple


class Claimed(NamedTuple):
    """One row of claim.sql / claim_limited.sql: same columns, same order. A tuple, not a
    dict: a dict of 15 keys per claimed run cost the worker about 1 us of CPU per run."""

    id: int
    task: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int
    max_attempts: int
    timeout_seconds: float | None
    lease_token: str  # text: the worker only hands it back
    priority: int
    group_key: str
    parent_id: int | None
    pickup_seconds: float
    has_steps: bool
    headers: dict[str, Any] | None  # W3C trace context of the enqueue (pgqueue.contrib.otel)


@dataclass(eq=False, slots=True)
class Held:
    """A run this worker holds under a lease: one attempt, from its claim to its outcome's
    write (and, for a thread that outlives it, until its code ends)."""

    id: int
    lease_token: str  # as claim.sql returns it: text, only ever handed back
    row: Claimed
    # the attempt's pgqueue.workflows.Context (typed where the attempt uses it: a record
    # imports no behaviour)
    ctx: Any
    invocation: asyncio.Future[Any] | None = None  # a sync task's call in its thread
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    # the worker's asyncio task for this attempt, while it awaits an async task's code
    awaiting: asyncio.Task[Any] | None = field(default=None, repr=False)
    submitted: bool = False  # its outcome went to the completer (which lists its lease)
    # write nothing (more): lease lost, run canceled, or (with submitted) the attempt's
    # timeout failure already went to the completer while its code still runs
    lost: bool = False
    released: bool = False  # handed back at shutdown
    # an attempt run wholly in a thread (Executor.start_in_thread): its timeout, on the loop
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)

    def stop(self) -> None:
        """Ask the attempt to stop: ctx.cancelled for everyone, real cancellation for
        async tasks. A thread cannot be stopped; its slot stays busy until it returns."""
        self.ctx.mark_cancelled()
        if self.awaiting is not None and not self.awaiting.done():
            self.awaiting.cancel()


@dataclass(slots=True)
class Outcome:
    """What became of one attempt. `state` is the run's next state. Not mutated once made
    (not frozen: a frozen dataclass costs a setattr call per field, per run)."""

    id: int
    lease_token: str
    state: str
    result: str | None = None  # JSON text
    error: str | None = None
    error_kind: str | None = None
    traceback: str | None = None
    delay: float | None = 0.0
    refund: bool = False
    wait_event: str | None = None
    wait_key: str | None = None
    wait_since: datetime | None = None
    wait_run_id: int | None = None
    wake_at: datetime | None = None  # a durable wait's end, exactly (else now() + delay)
    backoff: str | None = None  # RetryAfter's scope "group" or "queue": backs it off too
    # the exception of a failed attempt, for app.tracing (error reporters); never written
    exception: BaseException | None = None
