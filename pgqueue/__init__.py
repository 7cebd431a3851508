"""pgqueue: durable background jobs and workflows that live entirely in PostgreSQL."""

from pgqueue._version import __version__
from pgqueue.app import App, QueueConfig
from pgqueue.enqueue.batches import Batch, BatchState
from pgqueue.enqueue.checks import ValidationError
from pgqueue.errors import (
    ChildFailed,
    ChildMissing,
    ConfigError,
    DatabaseFull,
    DatabaseUnavailable,
    InvalidArguments,
    LeaseLost,
    NonDeterministic,
    NonRetryable,
    NotMigrated,
    OutOfRange,
    PayloadTooLarge,
    PermissionDenied,
    PgQueueError,
    RetryAfter,
    RunCanceled,
    RunFailed,
    RunNotFound,
    UnknownTask,
    UserError,
)
from pgqueue.ops.retention import Retention
from pgqueue.runs.handle import RunHandle
from pgqueue.runs.run import Run
from pgqueue.schedules.schedule import InvalidSchedule, Schedule, UnknownSchedule
from pgqueue.states import RunState, StepState
from pgqueue.tasks.retry import RetryPolicy
from pgqueue.tasks.task import Task
from pgqueue.workflows.async_context import AsyncContext
from pgqueue.workflows.context import Context, current

__all__ = [
    "App",
    "AsyncContext",
    "Batch",
    "BatchState",
    "ChildFailed",
    "ChildMissing",
    "ConfigError",
    "Context",
    "DatabaseFull",
    "DatabaseUnavailable",
    "InvalidArguments",
    "InvalidSchedule",
    "LeaseLost",
    "NonDeterministic",
    "NonRetryable",
    "NotMigrated",
    "OutOfRange",
    "PayloadTooLarge",
    "PermissionDenied",
    "PgQueueError",
    "QueueConfig",
    "Retention",
    "RetryAfter",
    "RetryPolicy",
    "Run",
    "RunCanceled",
    "RunFailed",
    "RunHandle",
    "RunNotFound",
    "RunState",
    "Schedule",
    "StepState",
    "Task",
    "UnknownSchedule",
    "UnknownTask",
    "UserError",
    "ValidationError",
    "__version__",
    "current",
]
