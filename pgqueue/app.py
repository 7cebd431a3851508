"""App: the facade a user holds. It builds the narrow objects that do the work and hands
each call to one of them:

- `database` (pgqueue.db.database.Database): the DSN and settings, the sync and async
  pools, migrations;
- `enqueuer` (pgqueue.enqueue.enqueuer.Enqueuer): inserts of runs and events, batches;
- `registry` (pgqueue.tasks.registry.Registry): tasks, queues and schedules in code,
  enqueues by task name;
- `operator` (pgqueue.ops.operations.Operator): operations and inspection.

Code inside pgqueue takes the one of them it uses, not the App."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, Unpack, overload

from pgqueue.db import payload as _json
from pgqueue.db.database import NOTIFY_ENV, ConnectionProvider, Database, DsnSource
from pgqueue.enqueue.enqueuer import EnqueueDeferrer, Enqueuer
from pgqueue.ops.operations import Operator
from pgqueue.tasks.registry import LIMIT_MAX, QueueConfig, Registry, WorkflowDecorator
from pgqueue.tasks.task import Task, TaskDecorator, TaskKeywords
from pgqueue.workflows.async_context import AsyncContext
from pgqueue.workflows.context import Context, SyncWrapper

if TYPE_CHECKING:
    from pgqueue._tracing import Tracing
    from pgqueue.schedules.schedule import Schedule
    from pgqueue.worker import Worker
    from pgqueue.worker.records import Claimed

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

__all__ = [
    "LIMIT_MAX",
    "NOTIFY_ENV",
    "App",
    "ConnectionProvider",
    "DsnSource",
    "EnqueueDeferrer",
    "QueueConfig",
    "SyncWrapper",
]


class _Via(Generic[P, R]):
    """An App method that is the method of the same name of one of its parts: written
    once, where the work is done (with its signature and docstring)."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.part = part
        self.name = method.__name__
        self.__doc__ = method.__doc__
        self.__wrapped__ = method

    @overload
    def __get__(self, app: None, owner: type[Any]) -> _Via[P, R]: ...

    @overload
    def __get__(self, app: object, owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, app: object | None, owner: type[Any]) -> Any:
        if app is None:
            return self
        return getattr(getattr(app, self.part), self.name)


class _Setting(Generic[T]):
    """An App attribute that is an attribute of the same name of one of its parts."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, app: None, owner: type[Any]) -> _Setting[T]: ...

    @overload
    def __get__(self, app: object, owner: type[Any]) -> T: ...

    def __get__(self, app: object | None, owner: type[Any]) -> Any:
        if app is None:
            return self
        return getattr(getattr(app, self.part), self.name)

    def __set__(self, app: object, value: T) -> None:
        setattr(getattr(app, self.part), self.name, value)


class App:
    """Registry of tasks and queues bound to one database.

    `dsn`: argument > `dsn_source` (asked at each use) > PGQUEUE_DSN > error, resolved at
    first use so that a module can create its App at import time and the CLI's --dsn can
    still apply.
    `pooler`: what sits between pgqueue and PostgreSQL, None (or "none"), "session" or
    "transaction" (PgBouncer's pool_mode=transaction; default PGQUEUE_POOLER). Through a
    transaction-mode pooler nothing relies on a session: no LISTEN (workers and wait()
    poll), no server-side prepared statements, no session setting (docs/scaling.md).
    `notify=False` (or PGQUEUE_NOTIFY=off) disables LISTEN/NOTIFY; the default is on,
    and off with pooler="transaction" (notify=True there sends NOTIFY at enqueue, for
    workers that connect past the pooler, and still never LISTENs).
    `max_payload_bytes`, `max_json_depth`: arguments, results and event payloads larger,
    or nested deeper (lists and dicts), are refused (PayloadTooLarge, InvalidArguments).
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        notify: bool | None = None,
        pooler: str | None = None,
        max_payload_bytes: int = _json.DEFAULT_MAX_PAYLOAD_BYTES,
        max_json_depth: int = _json.DEFAULT_MAX_JSON_DEPTH,
        pool_size: int = 4,
        default_queue: str = "default",
    ) -> None:
        self.database = Database(
            dsn,
            notify=notify,
            pooler=pooler,
            max_payload_bytes=max_payload_bytes,
            max_json_depth=max_json_depth,
            pool_size=pool_size,
        )
        self.enqueuer = Enqueuer(self.database)
        self.registry = Registry(self.enqueuer, default_queue)
        self.operator = Operator(self.database)
        # the registry's own dicts (a worker reads them once per run)
        self.tasks: dict[str, Task[Any, Any]] = self.registry.tasks
        self.queues: dict[str, QueueConfig] = self.registry.queues
        self.schedules: dict[str, Schedule] = self.registry.schedules
        # Around every sync call of a run in a worker thread (the task or workflow, its
        # on_success/on_failure hook), first one outermost: wrapper(ctx, call) must call
        # call() and return its result. The Django integration refreshes Django's database
        # connections there, as Django does around a request.
        self.sync_wrappers: list[SyncWrapper] = []

    # -- settings (the database's) -------------------------------------------------------

    pooler: _Setting[str | None] = _Setting("database")
    notify: _Setting[bool] = _Setting("database")
    pool_size: _Setting[int] = _Setting("database")
    max_payload_bytes: _Setting[int] = _Setting("database")
    max_json_depth: _Setting[int] = _Setting("database")
    dsn_source: _Setting[DsnSource | None] = _Setting("database")
    connection_provider: _Setting[ConnectionProvider | None] = _Setting("database")
    tracing: _Setting[Tracing | None] = _Setting("enqueuer")
    enqueue_deferrer: _Setting[EnqueueDeferrer | None] = _Setting("enqueuer")

    @property
    def dsn(self) -> str:
        return self.database.dsn

    @property
    def has_own_dsn(self) -> bool:
        """A DSN given (App(dsn=...), configure) or resolved from $PGQUEUE_DSN."""
        return self.database.has_own_dsn

    @property
    def listens(self) -> bool:
        """Whether this app's workers and waiters LISTEN (else they poll)."""
        return self.database.listens

    @property
    def default_queue(self) -> str:
        return self.registry.default_queue

    configure = _Via("database", Database.configure)

    @classmethod
    def embedded(cls, **kwargs: Any) -> App:
        """An App on the shared local embedded PostgreSQL (started if needed, migrated)."""
        from pgqueue.db import embedded

        app = cls(embedded.ensure_server(), **kwargs)
        app.migrate()
        return app

    # -- the database --------------------------------------------------------------------

    connection = _Via("database", Database.connection)
    async_connection = _Via("database", Database.async_connection)
    caller_connection = _Via("database", Database.caller_connection)
    close = _Via("database", Database.close)
    aclose = _Via("database", Database.aclose)
    close_async_pool = _Via("database", Database.close_async_pool)
    migrate = _Via("database", Database.migrate)
    check_schema = _Via("database", Database.check_schema)

    # -- tasks, queues and schedules in code (the registry) ----------------------------

    queue = _Via("registry", Registry.queue)
    get_task = _Via("registry", Registry.get_task)
    enqueue = _Via("registry", Registry.enqueue)
    enqueue_by_name = _Via("registry", Registry.enqueue_by_name)
    served_queues = _Via("registry", Registry.served_queues)
    schedule = _Via("registry", Registry.schedule)

    periodic = _Via("registry", Registry.periodic)

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
        return self.registry.task(fn, **options)

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
        return self.registry.workflow(fn, **options)

    # -- enqueues (the enqueuer) ----------------------------------------------------------

    insert_runs = _Via("enqueuer", Enqueuer.insert_runs)
    insert_now = _Via("enqueuer", Enqueuer.insert_now)
    insert_runs_async = _Via("enqueuer", Enqueuer.insert_runs_async)
    batch = _Via("enqueuer", Enqueuer.batch)
    get_batch = _Via("enqueuer", Enqueuer.get_batch)
    emit_event = _Via("enqueuer", Enqueuer.emit_event)

    # -- operations and inspection (the operator) --------------------------------------

    get_run = _Via("operator", Operator.get_run)
    get_run_async = _Via("operator", Operator.get_run_async)
    list_runs = _Via("operator", Operator.list_runs)
    run_errors = _Via("operator", Operator.run_errors)
    run_steps = _Via("operator", Operator.run_steps)
    cancel = _Via("operator", Operator.cancel)
    retry = _Via("operator", Operator.retry)
    set_limits = _Via("operator", Operator.set_limits)
    set_group_weights = _Via("operator", Operator.set_group_weights)
    group_weights = _Via("operator", Operator.group_weights)
    groups = _Via("operator", Operator.groups)
    set_paused = _Via("operator", Operator.set_paused)
    lift_group_backoff = _Via("operator", Operator.lift_group_backoff)
    set_priority_aging = _Via("operator", Operator.set_priority_aging)
    run_backoffs = _Via("operator", Operator.run_backoffs)
    queue_summary = _Via("operator", Operator.queue_summary)
    list_workers = _Via("operator", Operator.list_workers)
    prune = _Via("operator", Operator.prune)
    count_where = _Via("operator", Operator.count_where)
    cancel_where = _Via("operator", Operator.cancel_where)
    retry_where = _Via("operator", Operator.retry_where)
    purge_queue = _Via("operator", Operator.purge_queue)
    list_schedules = _Via("operator", Operator.list_schedules)
    pause_schedule = _Via("operator", Operator.pause_schedule)
    resume_schedule = _Via("operator", Operator.resume_schedule)
    trigger_schedule = _Via("operator", Operator.trigger_schedule)

    # -- workers ------------------------------------------------------------------------

    def worker(self, **options: Any) -> Worker:
        """A worker for this app; see pgqueue.worker.Worker for the options."""
        from pgqueue.worker import Worker

        return Worker(self, **options)

    def wrap_sync(self, ctx: Context, call: Callable[[], R]) -> Callable[[], R]:
        """`call` inside every one of `sync_wrappers` (what a worker thread runs)."""
        for wrapper in reversed(self.sync_wrappers):
            call = functools.partial(wrapper, ctx, call)
        return call

    def make_context(self, run: Claimed, worker_id: uuid.UUID | None = None) -> Context:
        # positional (run_id, task, queue, attempt, max_attempts, args, kwargs, priority,
        # group, database, lease, durable, progress, cancelled, cancel event, worker):
        # half the cost of keywords, once per claimed run
        return Context(
            run.id,
            run.task,
            run.queue,
            run.attempt,
            run.max_attempts,
            run.args,
            run.kwargs,
            run.priority,
            run.group_key or None,
            self.database,
            run.lease_token,
            None,
            None,
            False,
            None,
            worker_id,
        )
