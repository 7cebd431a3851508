"""pgqueue: durable background jobs and workflows that live entirely in PostgreSQL."""

__version__ = "0.2.0"

from pgqueue._checks import ValidationError
from pgqueue.app import App, QueueConfig
from pgqueue.batches import Batch, BatchState
from pgqueue.context import Context, current
from pgqueue.errors import (
    ChildFailed,
    ConfigError,
    DatabaseFull,
    DatabaseUnavailable,
    InvalidArguments,
    LeaseLost,
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
from pgqueue.retention import Retention
from pgqueue.retry import RetryPolicy
from pgqueue.runs import Run, RunHandle
from pgqueue.schedules import InvalidSchedule, Schedule, UnknownSchedule
from pgqueue.states import RunState, StepState
from pgqueue.tasks import Task

__all__ = [
    "App",
    "Batch",
    "BatchState",
    "ChildFailed",
    "ConfigError",
    "Context",
    "DatabaseFull",
    "DatabaseUnavailable",
    "InvalidArguments",
    "InvalidSchedule",
    "LeaseLost",
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
