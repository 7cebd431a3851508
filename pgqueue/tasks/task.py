"""Tasks: registered functions, their options, and how their runs are enqueued."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    ParamSpec,
    Protocol,
    TypedDict,
    TypeVar,
    Unpack,
    overload,
)

from pgqueue.enqueue import validators as _validators
from pgqueue.enqueue.checks import (
    ValidationError,
    check_key,
    check_max_attempts,
    check_name,
    check_priority,
    check_seconds,
)
from pgqueue.enqueue.options import EnqueueKeywords, EnqueueOptions, RunBatch, RunRow, build_row
from pgqueue.errors import InvalidArguments, OutOfRange
from pgqueue.runs.handle import RunHandle
from pgqueue.tasks.retry import DEFAULT_RETRY, RetryPolicy

if TYPE_CHECKING:
    from pgqueue.enqueue.enqueuer import Enqueuer
    from pgqueue.workflows.context import Context

P = ParamSpec("P")
R = TypeVar("R")

Validator = _validators.Validator
Hook = Callable[..., Any]
GroupFn = Callable[..., str | None]


class TaskKeywords(TypedDict, total=False):
    """The keywords of `@app.task(...)` and `@app.workflow(...)`, for type checkers: a
    misspelt option or a value of the wrong type is a type error."""

    name: str | None
    queue: str | None
    priority: int
    max_attempts: int
    timeout: float | None
    retry: RetryPolicy
    validator: Validator | None
    group: str | GroupFn | None
    on_success: Hook | None
    on_failure: Hook | None
    on_retry: Hook | None
    on_event: str | None  # @app.workflow only: started by each event of that name
    version: str | None  # @app.workflow only: recorded per run; other versions are left


class Arity:
    """What Signature.bind accepts, worked out once per task: a check of a call's
    arguments without binding them. `accepts` says True only for calls bind would accept;
    for any other call the caller asks bind, which raises the usual TypeError."""

    def __init__(self, signature: inspect.Signature) -> None:
        kinds = inspect.Parameter
        params = list(signature.parameters.values())
        positional = [
            p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
        ]
        self.positional = tuple(p.name for p in positional)
        self.min_args = sum(1 for p in positional if p.default is p.empty)
        var_args = any(p.kind is kinds.VAR_POSITIONAL for p in params)
        self.max_args = sys.maxsize if var_args else len(positional)
        self.var_kwargs = any(p.kind is kinds.VAR_KEYWORD for p in params)
        self.by_keyword = frozenset(
            p.name for p in params if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)
        )
        self.required_kwonly = frozenset(
            p.name for p in params if p.kind is kinds.KEYWORD_ONLY and p.default is p.empty
        )
        self.positional_only = frozenset(
            p.name for p in positional if p.kind is kinds.POSITIONAL_ONLY
        )

    def accepts(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        n = len(args)
        if n > self.max_args:
            return False
        if not kwargs:
            return n >= self.min_args and not self.required_kwonly
        keys = kwargs.keys()
        if self.var_kwargs:
            if not all(type(k) is str for k in keys):
                return False
        elif not keys <= self.by_keyword:
            return False
        if n and not keys.isdisjoint(self.positional[:n]):
            return False  # a value given twice
        missing = self.positional[n : self.min_args]
        if missing and not (keys >= set(missing) and self.positional_only.isdisjoint(missing)):
            return False
        return keys >= self.required_kwonly


class TaskDecorator(Protocol):
    """What `@app.task(...)` returns: it makes a function a Task. An `async def`'s Task
    has its coroutine's result type (what the run's result is), not the coroutine."""

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


class ScheduleDecorator(Protocol):
    """What `@app.periodic(...)` returns: it schedules a Task (or a function, made a
    Task with default options), and returns the Task with its types."""

    @overload
    def __call__(self, fn: Task[P, R], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


# A call without options: one shared instance (it is frozen), not a new one per enqueue.
NO_OPTIONS = EnqueueOptions()


class Task(Generic[P, R]):
    """A function registered with @app.task or @app.workflow under a stable name. `P`
    is its parameters (a workflow's without its Context), `R` the type of its result:
    what the function returns, or its coroutine for an `async def` task, so that the
    RunHandle[R] an enqueue returns waits for the task's type."""

    def __init__(
        self,
        enqueuer: Enqueuer,
        fn: Callable[..., Any],
        *,
        name: str,
        queue: str,
        priority: int,
        max_attempts: int,
        timeout: float | None,
        retry: RetryPolicy,
        validator: Validator | None,
        group: str | GroupFn | None,
        on_success: Hook | None,
        on_failure: Hook | None,
        workflow: bool,
        on_retry: Hook | None = None,
        version: str | None = None,
    ) -> None:
        self.name = check_name("task", name)
        try:
            self.queue = check_name("queue", queue)
            self.priority = check_priority(priority)
            self.max_attempts = check_max_attempts(max_attempts)
            self.timeout = (
                None if timeout is None else check_seconds("timeout", timeout, zero=False)
            )
            if isinstance(group, str):
                check_key("group key", group)
        except (InvalidArguments, OutOfRange) as exc:
            raise type(exc)(f"task {name!r}: {exc}") from None
        if version is not None:
            if not workflow:
                raise TypeError(f"task {name!r}: version= is for @app.workflow")
            check_name("workflow version", version)
        # a workflow's code version: recorded on each run's first start; a worker whose
        # code has another version leaves the run for one that has it
        self.version = version
        self.enqueuer = enqueuer  # where its runs are written
        self.fn = fn
        self.retry = retry
        self.validator = validator
        self.group = group
        self.on_success = on_success
        self.on_failure = on_failure
        self.on_retry = on_retry
        # Whether any hook follows an attempt: the worker's per-run test (most tasks have none)
        self.has_hooks = on_success is not None or on_failure is not None or on_retry is not None
        self.workflow = workflow
        self.is_async = inspect.iscoroutinefunction(fn)
        signature = inspect.signature(fn)
        if workflow:
            params = list(signature.parameters.values())
            if not params:
                raise TypeError(f"workflow {name!r} must take a Context as its first argument")
            signature = signature.replace(parameters=params[1:])
        self.signature = signature
        self.arity = Arity(signature)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly, in this process (no run is created)."""
        return self.fn(*args, **kwargs)

    def options(self, **options: Unpack[EnqueueKeywords]) -> BoundTask[P, R]:
        return BoundTask(self, EnqueueOptions(**options))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> RunHandle[R]:
        row = self.make_row(args, kwargs, NO_OPTIONS)
        return self.enqueuer.insert_runs([row])[0]

    def enqueue_many(
        self, items: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> list[RunHandle[R]]:
        return BoundTask(self, EnqueueOptions()).enqueue_many(items)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> RunHandle[R]:
        row = self.make_row(args, kwargs, NO_OPTIONS)
        return (await self.enqueuer.insert_runs_async([row]))[0]

    async def enqueue_many_async(
        self, items: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> list[RunHandle[R]]:
        return await BoundTask(self, EnqueueOptions()).enqueue_many_async(items)

    # -- used by enqueue and by the worker ------------------------------------------

    def validate(
        self, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[Sequence[Any], Mapping[str, Any]]:
        """Check arity, then the user's validator; return the arguments the task gets
        (the validator's values, see pgqueue.enqueue.validators). Raises TypeError /
        ValidationError."""
        if self.validator is None and self.arity.accepts(args, kwargs):
            return args, kwargs
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArguments(f"task {self.name!r}: {exc}") from None
        if self.validator is None:
            return args, kwargs
        return _validators.apply(self.name, self.validator, bound, args, kwargs)

    def group_for(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        if self.group is None or isinstance(self.group, str):
            return self.group
        return self.group(*args, **kwargs)

    def make_row(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], opts: EnqueueOptions
    ) -> RunRow:
        self.validate(args, kwargs)
        group = opts.group if opts.group is not None else self.group_for(args, kwargs)
        return build_row(
            self.enqueuer.database,
            self.name,
            args,
            kwargs,
            opts,
            queue=self.queue,
            priority=self.priority,
            max_attempts=self.max_attempts,
            timeout=self.timeout,
            group=group,
        )

    def event_row(self, event_id: int, payload: Any) -> RunRow:
        """The run event `event_id` starts for this workflow (@app.workflow(on_event=)):
        the payload as its one argument, keyed by the event so that it exists once."""
        key = EVENT_RUN_KEY.format(event_id=event_id, task=self.name)
        return self.make_row((payload,), {}, EnqueueOptions(idempotency_key=key))

    def run_ctx_args(self, ctx: Context, args: Sequence[Any]) -> Sequence[Any]:
        return [ctx, *args] if self.workflow else args


# The idempotency key of the run an event starts for a subscribed workflow: one run per
# emitted event and workflow, whatever retries the emitter makes of that insert.
EVENT_RUN_KEY = "pgqueue.event:{event_id}:{task}"

# A workflow function with this attribute true takes its Context only for the facts of
# the attempt (run id, attempt, arguments), never for a durable operation, so
# pgqueue.testing.eager can run it inline (the Django tasks backend's runners are such).
CONTEXT_ONLY = "_pgqueue_context_only"


class BoundTask(Generic[P, R]):
    """A task with per-enqueue options: `task.options(priority=-5, conn=conn).enqueue(...)`."""

    def __init__(self, task: Task[P, R], opts: EnqueueOptions) -> None:
        self.task = task
        self.opts = opts

    def options(self, **options: Unpack[EnqueueKeywords]) -> BoundTask[P, R]:
        return BoundTask(self.task, replace(self.opts, **options))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> RunHandle[R]:
        row = self.task.make_row(args, kwargs, self.opts)
        return self.task.enqueuer.insert_runs([row], conn=self.opts.sync_conn)[0]

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> RunHandle[R]:
        """enqueue() for asyncio code; joins `conn=` if it is a psycopg AsyncConnection."""
        row = self.task.make_row(args, kwargs, self.opts)
        return (await self.task.enqueuer.insert_runs_async([row], conn=self.opts.async_conn))[0]

    def enqueue_many(
        self, items: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> list[RunHandle[R]]:
        """Enqueue many runs in one statement. Each item is an args tuple/list or a kwargs
        dict. An idempotency key, if set in options, would collide: use enqueue() per key."""
        return self.task.enqueuer.insert_runs(self.make_rows(items), conn=self.opts.sync_conn)

    async def enqueue_many_async(
        self, items: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> list[RunHandle[R]]:
        rows = self.make_rows(items)
        return await self.task.enqueuer.insert_runs_async(rows, conn=self.opts.async_conn)

    def make_rows(self, items: Iterable[Sequence[Any] | Mapping[str, Any]]) -> Sequence[RunRow]:
        """The rows of an enqueue_many: one RunBatch, or with a unique_key function (a
        key per item), a row per item for sql/functions/enqueue_unique.sql, or with an
        `after` function (the dependencies of each item), a row per item."""
        if callable(self.opts.unique_key) or callable(self.opts.after):
            return [self.task.make_row(*_split(item), self.opts) for item in items]
        return RunBatch.build(self.task, self.opts, items)


def _split(item: Sequence[Any] | Mapping[str, Any]) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """An enqueue_many item as (args, kwargs)."""
    if isinstance(item, (list, tuple)):
        return item, {}
    if isinstance(item, Mapping):
        return (), dict(item)
    raise TypeError(
        f"enqueue_many items must be an args tuple/list or a kwargs dict, not {type(item).__name__}"
    )


__all__ = [
    "DEFAULT_RETRY",
    "BoundTask",
    "EnqueueOptions",
    "RunBatch",
    "RunRow",
    "ScheduleDecorator",
    "Task",
    "TaskDecorator",
    "TaskKeywords",
    "ValidationError",
]
