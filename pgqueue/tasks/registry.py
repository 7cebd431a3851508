"""The App's registry: queue declarations and their limits, tasks and workflows
registered under stable names, and schedules defined in code."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar, Unpack, overload

from pgqueue.enqueue.checks import check_name
from pgqueue.enqueue.options import EnqueueKeywords, EnqueueOptions, build_row
from pgqueue.errors import InvalidArguments, OutOfRange, UnknownTask
from pgqueue.schedules import schedule as _schedules
from pgqueue.tasks.rates import parse_rate
from pgqueue.tasks.retry import DEFAULT_RETRY, RetryPolicy
from pgqueue.tasks.task import (
    GroupFn,
    Hook,
    ScheduleDecorator,
    Task,
    TaskDecorator,
    TaskKeywords,
    Validator,
)

if TYPE_CHECKING:
    from pgqueue.enqueue.enqueuer import Enqueuer
    from pgqueue.runs.handle import RunHandle
    from pgqueue.workflows.async_context import AsyncContext
    from pgqueue.workflows.context import Context

P = ParamSpec("P")
R = TypeVar("R")


class WorkflowDecorator(Protocol):
    """What `@app.workflow(...)` returns: it takes a sync workflow (a Context first) or
    an async one (an AsyncContext first, awaited on the worker's loop)."""

    @overload
    def __call__(
        self, fn: Callable[Concatenate[AsyncContext, P], Coroutine[Any, Any, R]], /
    ) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[Concatenate[Context, P], R], /) -> Task[P, R]: ...


# pgqueue.queues.concurrency and group_concurrency are integers.
LIMIT_MAX = 2**31 - 1
# A group's weight (group_weights, default_group_weight): 1 to WEIGHT_MAX. Shares finer than
# 1:1000 are not a fairness anyone can observe, and the passes stay exact in a double.
WEIGHT_MAX = 1000


@dataclass(frozen=True)
class QueueConfig:
    name: str
    concurrency: int | None = None
    group_concurrency: int | None = None
    rate_limit: str | None = None  # "N/s", "N/m" or "N/h", as _rates.parse_rate reads it
    group_rate_limit: str | None = None
    ordered: bool = False
    # group -> weight, sorted by group (a tuple: the config is frozen); None: no weights
    group_weights: tuple[tuple[str, int], ...] | None = None
    default_group_weight: int = 1
    priority_aging: float | None = None  # seconds per priority step (docs/flow_control.md)


# the longest priority_aging: a day per step (a wait of 180 years from 0 to -32768)
AGING_MAX = 86400.0


def check_aging(queue: str, seconds: float | None) -> float | None:
    """`priority_aging` as stored: None (no aging) or seconds per step, more than 0 and at
    most AGING_MAX; InvalidArguments or OutOfRange otherwise."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArguments(
            f"queue {queue!r}: priority_aging must be seconds per step (a number, or None "
            f"for no aging), not {type(seconds).__name__}"
        )
    if not 0 < seconds <= AGING_MAX:
        raise OutOfRange(
            f"queue {queue!r}: priority_aging must be more than 0 and at most {AGING_MAX:g} "
            f"seconds per step (or None for no aging), not {seconds!r}"
        )
    return float(seconds)


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


def check_weight(queue: str, label: str, value: object) -> int:
    """`value` as a group weight: an int from 1 to WEIGHT_MAX, else InvalidArguments or
    OutOfRange naming `label`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArguments(
            f"queue {queue!r}: {label} must be an int from 1 to {WEIGHT_MAX}, "
            f"not {type(value).__name__}"
        )
    if not 1 <= value <= WEIGHT_MAX:
        raise OutOfRange(f"queue {queue!r}: {label} must be 1 to {WEIGHT_MAX}, not {value}")
    return value


def check_weights(
    queue: str,
    group_weights: Mapping[str, int] | None,
    default_group_weight: int,
    concurrency: int | None,
    group_concurrency: int | None,
) -> tuple[tuple[str, int], ...] | None:
    """The weights as QueueConfig keeps them (None for none or an empty map), or a clear
    error: each weight 1 to WEIGHT_MAX, group names strings, and a permit limit
    (concurrency or group_concurrency) for the weights to share out: a queue without one
    is not claimed by claim_limited()."""
    check_weight(queue, "default_group_weight", default_group_weight)
    if group_weights is None:
        return None
    if not isinstance(group_weights, Mapping):
        raise InvalidArguments(
            f"queue {queue!r}: group_weights must be a dict of group -> weight, "
            f"not {type(group_weights).__name__}"
        )
    for group, weight in group_weights.items():
        if not isinstance(group, str) or not group:
            raise InvalidArguments(
                f"queue {queue!r}: group_weights keys must be group names (non-empty "
                f"strings), not {group!r}"
            )
        check_weight(queue, f"group_weights[{group!r}]", weight)
    if not group_weights:
        return None
    if concurrency is None and group_concurrency is None:
        raise InvalidArguments(
            f"queue {queue!r}: group_weights share out a queue's permits: give it "
            "concurrency=N or group_concurrency=N too"
        )
    return tuple(sorted(group_weights.items()))


def declare_queue(
    queues: dict[str, QueueConfig],
    name: str,
    concurrency: int | None,
    group_concurrency: int | None,
    rate_limit: str | None = None,
    group_rate_limit: str | None = None,
    ordered: bool = False,
    group_weights: Mapping[str, int] | None = None,
    default_group_weight: int = 1,
    priority_aging: float | None = None,
) -> QueueConfig:
    check_limits(name, concurrency, group_concurrency, rate_limit, group_rate_limit, ordered)
    weights = check_weights(
        name, group_weights, default_group_weight, concurrency, group_concurrency
    )
    config = QueueConfig(
        check_name("queue", name),
        concurrency,
        group_concurrency,
        rate_limit,
        group_rate_limit,
        ordered,
        weights,
        default_group_weight,
        check_aging(name, priority_aging),
    )
    queues[name] = config
    return config


class Registry:
    """The tasks, queues and schedules an App declares, each under a stable name. Its
    tasks write their runs through `enqueuer`."""

    def __init__(self, enqueuer: Enqueuer, default_queue: str = "default") -> None:
        self.enqueuer = enqueuer
        self.database = enqueuer.database
        self.default_queue = check_name("queue", default_queue)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.queues: dict[str, QueueConfig] = {}
        self.schedules: dict[str, _schedules.Schedule] = {}

    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        group_concurrency: int | None = None,
        rate_limit: str | None = None,
        group_rate_limit: str | None = None,
        ordered: bool = False,
        group_weights: Mapping[str, int] | None = None,
        default_group_weight: int = 1,
        priority_aging: float | None = None,
    ) -> QueueConfig:
        """Declare a queue and its limits (stored in pgqueue.queues when a worker starts).
        rate_limit / group_rate_limit: "N/s", "N/m" or "N/h", at most N starts of the
        queue (of one group) in any such interval; ordered=True (with group_concurrency=1):
        a group's runs start one after another in id order; group_weights={"gold": 3}
        (with concurrency or group_concurrency): while groups have runs waiting, their
        starts are proportional to their weights, default_group_weight for the groups not
        named; priority_aging=S: a waiting run's priority improves by one step every S
        seconds (docs/flow_control.md)."""
        return declare_queue(
            self.queues,
            name,
            concurrency,
            group_concurrency,
            rate_limit,
            group_rate_limit,
            ordered,
            group_weights,
            default_group_weight,
            priority_aging,
        )

    # -- tasks ----------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: None = None, /, **options: Unpack[TaskKeywords]) -> TaskDecorator: ...

    def task(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Register a function as a task: `@app.task` or `@app.task(queue=..., ...)`.

        Options: name, queue, priority (lower runs first), max_attempts, timeout (seconds),
        retry (RetryPolicy), validator, group (str or callable of the arguments),
        on_success(ctx, result), on_failure(ctx, error), on_retry(ctx, error) after each
        failed attempt that will be retried.
        """
        if fn is not None:
            return self.register(fn, workflow=False)
        return lambda f: self.register(f, workflow=False, **options)

    @overload
    def workflow(
        self, fn: Callable[Concatenate[AsyncContext, P], Coroutine[Any, Any, R]], /
    ) -> Task[P, R]: ...

    @overload
    def workflow(self, fn: Callable[Concatenate[Context, P], R], /) -> Task[P, R]: ...

    @overload
    def workflow(
        self, fn: None = None, /, **options: Unpack[TaskKeywords]
    ) -> WorkflowDecorator: ...

    def workflow(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Register a workflow: like a task, but it receives a Context first (an
        AsyncContext if it is an `async def`)."""
        if fn is not None:
            return self.register(fn, workflow=True)
        return lambda f: self.register(f, workflow=True, **options)

    def register(
        self,
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
        on_event: str | None = None,
        version: str | None = None,
    ) -> Task[Any, Any]:
        """The Task for `fn`, added to `tasks` (named module.qualname unless `name=`).
        A workflow with `on_event` is started by every event of that name emitted through
        this App (app.emit_event, ctx.emit_event), with the payload as its argument."""
        task_name = name or f"{fn.__module__}.{fn.__qualname__}"
        if on_event is not None:
            if not workflow:
                raise TypeError(f"task {task_name!r}: on_event= is for @app.workflow")
            check_name("event", on_event)
        if task_name in self.tasks and self.tasks[task_name].fn is not fn:
            raise ValueError(f"two tasks are named {task_name!r}: give one of them name=...")
        task: Task[Any, Any] = Task(
            self.enqueuer,
            fn,
            name=task_name,
            queue=queue or self.default_queue,
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
            version=version,
        )
        if on_event is not None:
            try:
                task.signature.bind(None)
            except TypeError:
                raise TypeError(
                    f"workflow {task_name!r} is started by event {on_event!r}: it must take "
                    "the event's payload as its one argument after the Context"
                ) from None
            subscribed = self.enqueuer.subscribers.setdefault(on_event, [])
            subscribed[:] = [t for t in subscribed if t.name != task_name] + [task]
        self.tasks[task_name] = task
        return task

    def get_task(self, name: str) -> Task[Any, Any]:
        return find_task(self.tasks, name)

    def served_queues(self) -> list[str]:
        """Queues a worker serves by default: the declared ones and those of its tasks."""
        return sorted({self.default_queue, *self.queues, *(t.queue for t in self.tasks.values())})

    # -- enqueues by name ---------------------------------------------------------------

    def enqueue(self, task: str, /, *args: Any, **kwargs: Any) -> RunHandle:
        """Enqueue a registered task by name."""
        return self.get_task(task).enqueue(*args, **kwargs)

    def enqueue_by_name(
        self,
        /,
        task: str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Unpack[EnqueueKeywords],
    ) -> RunHandle:
        """Enqueue a run of a task this process does not import (from the CLI, or from a
        service that only produces work): its arguments are checked by the worker. A
        registered task's own options and checks apply."""
        if task in self.tasks:
            return self.tasks[task].options(**options).enqueue(*args, **(kwargs or {}))
        opts = EnqueueOptions(**options)
        row = build_row(
            self.database,
            check_name("task", task),
            args,
            kwargs or {},
            opts,
            queue=self.default_queue,
        )
        return self.enqueuer.insert_runs([row], conn=opts.sync_conn)[0]

    # -- schedules ------------------------------------------------------------------------

    def periodic(
        self,
        *,
        cron: str,
        tz: str = "UTC",
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
        catch_up: bool = False,
        name: str | None = None,
    ) -> ScheduleDecorator:
        """Enqueue a task at every tick of `cron` (in zone `tz`) with `args`/`kwargs`.

        Put it above `@app.task(...)`, or use it alone (the function is then registered
        as a task with default options). The schedule is named after the task unless
        `name=` is given, which a task with several schedules needs. A bad expression or
        zone raises pgqueue.InvalidSchedule here. See docs/schedules.md."""
        _schedules.check_cron(cron, tz)

        def decorate(target: Callable[..., Any]) -> Task[Any, Any]:
            task = target if isinstance(target, Task) else self.task(target)
            self.schedule(
                name or task.name,
                cron,
                task,
                args=args,
                kwargs=kwargs,
                tz=tz,
                queue=queue,
                catch_up=catch_up,
            )
            return task

        return decorate  # type: ignore[return-value]  # its overloads are ScheduleDecorator's

    def schedule(
        self,
        name: str,
        cron: str,
        task: Task[Any, Any] | str,
        *,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        tz: str = "UTC",
        queue: str | None = None,
        catch_up: bool = False,
    ) -> _schedules.Schedule:
        """Define schedule `name`: enqueue `task` (a Task, or a task name this process
        may not import) at every tick of `cron` in zone `tz`. Workers write it to
        pgqueue.schedules when they start. After downtime only the latest missed tick
        fires, unless catch_up=True (then every missed tick, at most 100)."""
        definition = _schedules.define(
            self, name, cron, task, args=args, kwargs=kwargs, tz=tz, queue=queue, catch_up=catch_up
        )
        return add_schedule(self.schedules, name, definition)


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
