"""pgqueue: durable background jobs and workflows that live entirely in PostgreSQL."""

__version__ = "0.1.0"

from pgqueue.app import App, QueueConfig  # noqa: E402
from pgqueue.context import Context  # noqa: E402
from pgqueue.errors import (  # noqa: E402
    ConfigError,
    LeaseLost,
    NonRetryable,
    NotMigrated,
    PayloadTooLarge,
    PgQueueError,
    RetryAfter,
    RunCanceled,
    RunFailed,
    RunNotFound,
    UnknownTask,
    UserError,
)
from pgqueue.retry import RetryPolicy  # noqa: E402
from pgqueue.runs import Run, RunHandle  # noqa: E402
from pgqueue.tasks import Task, ValidationError  # noqa: E402

__all__ = [
    "App",
    "ConfigError",
    "Context",
    "LeaseLost",
    "NonRetryable",
    "NotMigrated",
    "PayloadTooLarge",
    "PgQueueError",
    "QueueConfig",
    "RetryAfter",
    "RetryPolicy",
    "Run",
    "RunCanceled",
    "RunFailed",
    "RunHandle",
    "RunNotFound",
    "Task",
    "UnknownTask",
    "UserError",
    "ValidationError",
    "__version__",
]
