"""The states of a run: the values the `state` column of `pgqueue.runs` may hold.

docs/state_machine.md names every transition between them, with the SQL that makes it."""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    """One run's state; the members are exactly the values the check constraint
    `runs_state_check` allows. A member is a `str` equal to its value, so it goes to
    PostgreSQL as text and to JSON as the plain string, and compares equal to the text
    a query returns. See docs/state_machine.md for what each state means and which
    statement moves a run out of it."""

    SCHEDULED = "scheduled"
    """Waiting for its `run_at` (a delay, a backoff, `RetryAfter`, `ctx.sleep`)."""
    QUEUED = "queued"
    """Due and ready to be claimed."""
    RUNNING = "running"
    """Held by exactly one worker under a lease."""
    WAITING = "waiting"
    """A workflow run suspended until an event, a child run or a deadline."""
    SUCCEEDED = "succeeded"
    """Finished: the task returned (terminal)."""
    FAILED = "failed"
    """Finished: no attempts left, or a failure that is not retried (terminal)."""
    CANCELED = "canceled"
    """Finished: canceled by a user or an operator (terminal)."""


STATES: tuple[RunState, ...] = tuple(RunState)
"""Every state, in the order of the lifecycle (the order the CLI and the docs list)."""
LIVE_STATES: tuple[RunState, ...] = (
    RunState.SCHEDULED,
    RunState.QUEUED,
    RunState.RUNNING,
    RunState.WAITING,
)
"""The states of a run that has not finished."""
FINISHED_STATES: tuple[RunState, ...] = (
    RunState.SUCCEEDED,
    RunState.FAILED,
    RunState.CANCELED,
)
"""The terminal states: only an operator's retry takes a run out of them."""
TERMINAL_STATES: frozenset[str] = frozenset(s.value for s in FINISHED_STATES)
"""FINISHED_STATES as a set of plain strings, for membership tests. A member is found in
it too (equal hash and value); holding the values keeps the test on the worker's per-run
path (`outcome.state in TERMINAL_STATES`) an identity hit on the interned strings."""


class StepState(StrEnum):
    """One workflow step's state: the values the check constraint `steps_state_check` of
    `pgqueue.steps` allows. Like RunState, a member is a `str` equal to its value."""

    RUNNING = "running"
    """Its body is running now (recorded when it starts, so that an operator sees it)."""
    WAITING = "waiting"
    """A durable wait: a sleep, an event, a child run or the children of a map."""
    SUCCEEDED = "succeeded"
    """Done, its output memoized: a replay returns it and never runs the body again."""
    FAILED = "failed"
    """Done with an error (a timed-out step or a failed child): a replay raises it again."""
