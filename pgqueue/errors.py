"""Exception types a user can catch. Every message says what to do next."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pgqueue.runs.run import Run

# The longest delay or timeout pgqueue accepts, 100 years: beyond it now() + delay overflows
# sooner or later, and nobody means it (pgqueue.enqueue.checks, RetryPolicy, RetryAfter).
MAX_SECONDS = 100 * 365 * 86400


class PgQueueError(Exception):
    """Base class of every pgqueue error."""


class UserError(PgQueueError):
    """Bad input or configuration; the CLI prints it as one line and exits 2."""


class ConfigError(UserError):
    """No database configured, a malformed DSN, an unreachable server."""


class DatabaseUnavailable(ConfigError):
    """No connection to the database in time: the server is down, restarting, or failing
    over. Waits and worker duties treat it as an outage and try again."""


class DatabaseFull(DatabaseUnavailable):
    """The database server is out of disk space (PostgreSQL's disk_full, SQLSTATE 53100):
    the statement failed and wrote nothing. Free space on the server's data directory;
    worker duties treat it as an outage and retry until then."""


class NotMigrated(UserError):
    """The database has no pgqueue schema, or an older one."""


class PermissionDenied(UserError):
    """The connecting role lacks a privilege pgqueue needs (see `pgqueue grants`)."""


class UnknownTask(UserError, LookupError):
    """A task name that no App registered."""


class InvalidArguments(UserError, TypeError):
    """Arguments that are not JSON, or do not fit the task's signature."""


class OutOfRange(UserError, ValueError):
    """A number or a length outside what pgqueue can store (priority, max_attempts,
    timeouts, delays, names)."""


class PayloadTooLarge(UserError, ValueError):
    """Arguments or a result over the App's max_payload_bytes."""


class RunNotFound(UserError, LookupError):
    """No run with that id (it may have been pruned)."""


class RunFailed(PgQueueError):
    """Raised by RunHandle.wait() when the run ended in state `failed`."""

    def __init__(self, run: Run) -> None:
        self.run = run
        super().__init__(f"run {run.id} ({run.task}) failed: {run.error}")


class RunCanceled(PgQueueError):
    """Raised by RunHandle.wait() when the run was canceled."""

    def __init__(self, run: Run) -> None:
        self.run = run
        super().__init__(f"run {run.id} ({run.task}) was canceled")


BACKOFF_SCOPES = ("run", "group", "queue")


class RetryAfter(Exception):
    """Raise from a task to run it again after `seconds` without using an attempt.

    `scope="group"`: no other run of its group (its `group_key`) starts before then
    either, on any worker; `scope="queue"`: no run of its queue. A longer backoff already
    in force stays. `pgqueue queues resume QUEUE` lifts them (docs/flow_control.md)."""

    def __init__(self, seconds: float, reason: str = "", *, scope: str = "run") -> None:
        if scope not in BACKOFF_SCOPES:
            raise ValueError(f"RetryAfter scope must be 'run', 'group' or 'queue', not {scope!r}")
        # math.inf: no due time (the run stays scheduled at the latest due time, until
        # canceled); any other value must give a due time the database can store
        # (docs/security.md, Input limits)
        if not (0 <= seconds <= MAX_SECONDS or seconds == float("inf")):
            raise ValueError(
                f"RetryAfter seconds must be 0 to {MAX_SECONDS:,} (100 years) or math.inf, "
                f"not {seconds!r}"
            )
        self.seconds = float(seconds)
        self.scope = scope
        super().__init__(reason or f"retry after {seconds:g}s")


class NonRetryable(Exception):
    """Raise from a task to fail the run now, whatever attempts remain."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)


class ChildFailed(NonRetryable):
    """Raised in a workflow by ctx.call() when the child run failed or was canceled.
    Uncaught, it fails the parent at once (the child already used its own retries)."""

    def __init__(self, run_id: int, task: str, state: str, error: str | None) -> None:
        self.run_id, self.task, self.state, self.error = run_id, task, state, error
        detail = f": {error}" if error else ""
        super().__init__(f"child run {run_id} ({task}) {state}{detail}")


class ChildMissing(NonRetryable):
    """Raised in a workflow by ctx.call() or ctx.map() when a child run it started no
    longer exists (deleted, or pruned by retention while the parent waited). Not retried:
    every replay would find it missing. Uncaught, it fails the parent at once."""

    def __init__(self, run_id: int, parent_id: int, step: str) -> None:
        self.run_id, self.parent_id, self.step = run_id, parent_id, step
        super().__init__(
            f"child run {run_id} of step {step!r} (parent run {parent_id}) no longer exists: "
            "it was deleted or pruned while the parent waited; retry the parent under a new "
            "step name, or catch pgqueue.ChildMissing in the workflow"
        )


class NonDeterministic(NonRetryable):
    """A workflow's replay diverged from its recorded history: a step it had recorded was
    called at another position among the run's durable operations, or as another call
    (another function, task or event, or other arguments). Raised instead of handing
    that code a result stored for other code; not retried (a replay diverges again).

    `step` is the step's name; `position` and `call` are the new call's,
    `recorded_position` and `recorded_call` the history's. A call reads
    `module.function args#<hash>`: the step function's qualified name (or the operation and
    its task or event) and a hash of its JSON arguments."""

    def __init__(
        self,
        run_id: int,
        step: str,
        position: int,
        call: str,
        recorded_position: int,
        recorded_call: str,
        *,
        message: str | None = None,
    ) -> None:
        self.run_id, self.step = run_id, step
        self.position, self.call = position, call
        self.recorded_position, self.recorded_call = recorded_position, recorded_call
        super().__init__(
            message
            or f"the replay of run {run_id} diverged from its history at step {step!r}: "
            f"recorded as operation {recorded_position} {recorded_call}, now called as "
            f"operation {position} {call}; code between steps must be deterministic, so "
            "put a changed step behind ctx.patched(), give it a new name, or let the runs "
            "in flight finish on the old code (docs/workflows.md, Determinism)"
        )


class LeaseLost(BaseException):
    """This worker no longer holds the run (lease expired, run rescued or canceled).
    A BaseException, so that a task's `except Exception` cannot swallow it."""
