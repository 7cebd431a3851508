"""The App's registry: queue declarations and their limits, and registering a function as
a task or workflow under a stable name. App.task, App.workflow, App.queue and App.get_task
call these with the App's own dicts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgqueue.enqueue.checks import check_name
from pgqueue.errors import InvalidArguments, OutOfRange, UnknownTask
from pgqueue.schedules import schedule as _schedules
from pgqueue.tasks.rates import parse_rate
from pgqueue.tasks.retry import DEFAULT_RETRY, RetryPolicy
from pgqueue.tasks.task import GroupFn, Hook, Task, Validator

if TYPE_CHECKING:
    from pgqueue.app import App

# pgqueue.queues.concurrency and group_concurrency are integers.
LIMIT_MAX = 2**31 - 1


@dataclass(frozen=True)
class QueueConfig:
    name: str
    concurrency: int | None = None
    group_concurrency: int | None = None
    rate_limit: str | None = None  # "N/s", "N/m" or "N/h", as _rates.parse_rate reads it
    group_rate_limit: str | None = None
    ordered: bool = False


def check_limits(
    queue: str,
    concurrency: int | None,
    group_concurrency: int | None,
    rate_limit: str | None = None,
    group_rate_limit: str | None = None,
    ordered: bool = False,
) -> None:
    """OutOfRange unless each limit is None (no limit) or 1 to LIMIT_MAX, InvalidArguments
    for a rate limit not of the form N/s, N/m or N/h, or for `ordered` without
    group_concurrency 1."""
    for label, value in (
        ("concurrency", concurrency),
        ("group_concurrency", group_concurrency),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidArguments(
                f"queue {queue!r}: {label} must be an int (or None for no limit), "
                f"not {type(value).__name__}"
            )
        if value is not None and not 1 <= value <= LIMIT_MAX:
            raise OutOfRange(
                f"queue {queue!r}: {label} must be 1 to {LIMIT_MAX} (or None for no limit), "
                f"not {value}"
            )
    parse_rate(f"queue {queue!r}: rate_limit", rate_limit)
    parse_rate(f"queue {queue!r}: group_rate_limit", group_rate_limit)
    if not isinstance(ordered, bool):
        raise InvalidArguments(
            f"queue {queue!r}: ordered must be True or False, not {type(ordered).__name__}"
        )
    if ordered and group_concurrency != 1:
        raise InvalidArguments(
            f"queue {queue!r}: ordered=True needs group_concurrency=1 (one run per group at "
            f"a time), not {group_concurrency}"
        )


def declare_queue(
    queues: dict[str, QueueConfig],
    name: str,
    concurrency: int | None,
    group_concurrency: int | None,
    rate_limit: str | None = None,
    group_rate_limit: str | None = None,
    ordered: bool = False,
) -> QueueConfig:
    check_limits(name, concurrency, group_concurrency, rate_limit, group_rate_limit, ordered)
    config = QueueConfig(
        check_name("queue", name),
        concurrency,
        group_concurrency,
        rate_limit,
        group_rate_limit,
        ordered,
    )
    queues[name] = config
    return config


def register(
    app: App,
    fn: Callable[..., Any],
    *,
    workflow: bool,
    name: str | None = None,
    queue: str | None = None,
    priority: int = 0,
    max_attempts: int = 3,
    timeout: float | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
    validator: Validator | None = None,
    group: str | GroupFn | None = None,
    on_success: Hook | None = None,
    on_failure: Hook | None = None,
    on_retry: Hook | None = None,
) -> Task[Any, Any]:
    """The Task for `fn`, added to app.tasks (named module.qualname unless `name=`)."""
    task_name = name or f"{fn.__module__}.{fn.__qualname__}"
    if task_name in app.tasks and app.tasks[task_name].fn is not fn:
        raise ValueError(f"two tasks are named {task_name!r}: give one of them name=...")
    task: Task[Any, Any] = Task(
        app,
        fn,
        name=task_name,
        queue=queue or app.default_queue,
        priority=priority,
        max_attempts=max_attempts,
        timeout=timeout,
        retry=retry,
        validator=validator,
        group=group,
        on_success=on_success,
        on_failure=on_failure,
        on_retry=on_retry,
        workflow=workflow,
    )
    app.tasks[task_name] = task
    return task


def find_task(tasks: dict[str, Task[Any, Any]], name: str) -> Task[Any, Any]:
    try:
        return tasks[name]
    except KeyError:
        known = ", ".join(sorted(tasks)) or "none"
        raise UnknownTask(f"unknown task {name!r}; this app registers: {known}") from None


def add_schedule(
    schedules: dict[str, _schedules.Schedule], name: str, definition: _schedules.Schedule
) -> _schedules.Schedule:
    """Record `definition` as schedule `name`; the same definition again is no change."""
    if schedules.get(name, definition) != definition:
        raise _schedules.InvalidSchedule(
            f"two schedules are named {name!r}: give one of them name=..."
        )
    schedules[name] = definition
    return definition
