"""App: the registry of tasks and queues, and the entry point to the database."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

import psycopg
from psycopg_pool import PoolTimeout

from pgqueue.aio import AsyncApp
from pgqueue.db import connect as db
from pgqueue.db import migrate
from pgqueue.db import payload as _json
from pgqueue.db import pool as _pool
from pgqueue.enqueue import batches as _batches
from pgqueue.enqueue import by_name as _enqueue
from pgqueue.enqueue import inserts as _inserts
from pgqueue.enqueue.checks import check_name
from pgqueue.errors import OutOfRange
from pgqueue.ops.bulk import BulkActions
from pgqueue.ops.operations import Operations
from pgqueue.runs.handle import RunHandle
from pgqueue.schedules import schedule as _schedules
from pgqueue.schedules.actions import ScheduleActions
from pgqueue.tasks import registry as _registry
from pgqueue.tasks.registry import LIMIT_MAX, QueueConfig
from pgqueue.tasks.task import RunRow, Task
from pgqueue.workflows.context import Context

if TYPE_CHECKING:
    from pgqueue._tracing import Tracing
    from pgqueue.worker import Worker
    from pgqueue.worker._claimed import Claimed

P = ParamSpec("P")
R = TypeVar("R")

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

NOTIFY_ENV = "PGQUEUE_NOTIFY"

# Returns the connection of the caller's open transaction, or None (see App.caller_connection).
ConnectionProvider = Callable[[], "psycopg.Connection[Any] | None"]
# Takes over an enqueue that cannot join the caller's open transaction (see App.insert_runs):
# (app, rows, trace headers or None) -> handles, inserted later by App.insert_now.
EnqueueDeferrer = Callable[["App", Sequence[RunRow], "str | None"], "list[RunHandle] | None"]
# Returns the DSN to use now (see App.dsn_source).
DsnSource = Callable[[], str]
# Calls a worker's sync call (task, workflow, hook) for a run and returns its result; see
# App.sync_wrappers.
SyncWrapper = Callable[[Context, Callable[[], Any]], Any]


class App(Operations, ScheduleActions, BulkActions, AsyncApp):
    """Registry of tasks and queues bound to one database.

    A façade over small parts: the registry (pgqueue.tasks.registry), enqueues by name and
    events (_enqueue), the calls of operators and inspection (mixed in from
    _operations; bulk ones from _bulk), of schedules (_schedule_actions), opening the
    pool (_pool), the async calls (pgqueue.aio). insert_runs and connection(), on every
    Task.enqueue's path, are written out here so that it takes no call more.

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
        self._dsn = db.check_dsn(dsn) if dsn else None
        self.pooler = db.resolve_pooler(pooler)
        if notify is None:
            default = "off" if self.pooler == "transaction" else "on"
            notify = os.environ.get(NOTIFY_ENV, default).lower() not in ("off", "0", "false", "no")
        self.notify = notify
        self.max_payload_bytes = max_payload_bytes
        if max_json_depth < 1:
            raise OutOfRange(f"max_json_depth must be 1 or more, not {max_json_depth}")
        # arguments, results and event payloads nested deeper are refused
        self.max_json_depth = max_json_depth
        self.pool_size = pool_size
        self.default_queue = check_name("queue", default_queue)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.queues: dict[str, QueueConfig] = {}
        self.schedules: dict[str, _schedules.Schedule] = {}
        # Without a DSN of its own, the App asks this at each use and follows a framework's
        # settings (Django's test runner switches DATABASES after setup); the pool reopens
        # on a new answer.
        self.dsn_source: DsnSource | None = None
        self._pool: _pool.CheckedPool | None = None
        self._pool_pid = 0
        self._pool_dsn = ""
        self._lock = threading.Lock()
        self.connection_provider: ConnectionProvider | None = None
        # For a caller's transaction that pgqueue cannot join (Django on psycopg2): called
        # when neither conn= nor connection_provider gave a connection, it returns the
        # runs' handles once it has arranged their insert (at the commit), or None to let
        # pgqueue insert them now.
        self.enqueue_deferrer: EnqueueDeferrer | None = None
        # Around every sync call of a run in a worker thread (the task or workflow, its
        # on_success/on_failure hook), first one outermost: wrapper(ctx, call) must call
        # call() and return its result. The Django integration refreshes Django's database
        # connections there, as Django does around a request.
        self.sync_wrappers: list[SyncWrapper] = []
        # Spans around enqueues and attempts: None unless pgqueue.contrib.otel.instrument
        # installed them (then one `is not None` test per enqueue and per attempt).
        self.tracing: Tracing | None = None

    # -- configuration ----------------------------------------------------------------

    @property
    def dsn(self) -> str:
        if self._dsn is not None:
            return self._dsn
        if self.dsn_source is not None:
            return self.dsn_source()
        self._dsn = db.resolve_dsn(None)
        return self._dsn

    @property
    def has_own_dsn(self) -> bool:
        """A DSN given (App(dsn=...), configure) or resolved from $PGQUEUE_DSN."""
        return self._dsn is not None

    @property
    def listens(self) -> bool:
        """Whether this app's workers and waiters LISTEN (else they poll): with
        notifications on, and never through a pooler in transaction mode."""
        return self.notify and self.pooler != "transaction"

    def configure(
        self, *, dsn: str | None = None, notify: bool | None = None, pooler: str | None = None
    ) -> None:
        """Override settings after import (the CLI's --dsn, --pooler). Closes an open
        pool. A pooler given here sets notify to its default unless notify is given too."""
        if dsn is not None:
            self.close()
            self._dsn = db.check_dsn(dsn)
        if pooler is not None:
            self.close()
            self.pooler = db.resolve_pooler(pooler)
            if notify is None:
                notify = self.pooler != "transaction"
        if notify is not None:
            self.notify = notify

    @classmethod
    def embedded(cls, **kwargs: Any) -> App:
        """An App on the shared local embedded PostgreSQL (started if needed, migrated)."""
        from pgqueue.db import embedded

        app = cls(embedded.ensure_server(), **kwargs)
        app.migrate()
        return app

    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        group_concurrency: int | None = None,
        rate_limit: str | None = None,
        group_rate_limit: str | None = None,
        ordered: bool = False,
    ) -> QueueConfig:
        """Declare a queue and its limits (stored in pgqueue.queues when a worker starts).
        rate_limit / group_rate_limit: "N/s", "N/m" or "N/h", at most N starts of the
        queue (of one group) in any such interval; ordered=True (with group_concurrency=1):
        a group's runs start one after another in id order (docs/flow_control.md)."""
        return _registry.declare_queue(
            self.queues, name, concurrency, group_concurrency, rate_limit, group_rate_limit, ordered
        )

    # -- registering tasks --------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, fn: None = None, /, **options: Any
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Register a function as a task: `@app.task` or `@app.task(queue=..., ...)`.

        Options: name, queue, priority (lower runs first), max_attempts, timeout (seconds),
        retry (RetryPolicy), validator, group (str or callable of the arguments),
        on_success(ctx, result), on_failure(ctx, error), on_retry(ctx, error) after each
        failed attempt that will be retried.
        """
        if fn is not None:
            return _registry.register(self, fn, workflow=False)
        return lambda f: _registry.register(self, f, workflow=False, **options)

    @overload
    def workflow(self, fn: Callable[Concatenate[Context, P], R], /) -> Task[P, R]: ...

    @overload
    def workflow(
        self, fn: None = None, /, **options: Any
    ) -> Callable[[Callable[Concatenate[Context, P], R]], Task[P, R]]: ...

    def workflow(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Register a workflow: like a task, but it receives a Context first."""
        if fn is not None:
            return _registry.register(self, fn, workflow=True)
        return lambda f: _registry.register(self, f, workflow=True, **options)

    def get_task(self, name: str) -> Task[Any, Any]:
        return _registry.find_task(self.tasks, name)

    def enqueue(self, task: str, /, *args: Any, **kwargs: Any) -> RunHandle:
        """Enqueue a registered task by name."""
        return self.get_task(task).enqueue(*args, **kwargs)

    def enqueue_by_name(
        self,
        task: str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> RunHandle:
        """Enqueue a run of a task this process does not import (from the CLI, or from a
        service that only produces work). Its arguments are checked by the worker."""
        return _enqueue.by_name(self, task, args, kwargs, options)

    # -- database access ----------------------------------------------------------------

    def _get_pool(self) -> _pool.CheckedPool:
        dsn = self.dsn
        with self._lock:
            if self._pool is None or self._pool_pid != os.getpid() or self._pool_dsn != dsn:
                if self._pool is not None and self._pool_pid == os.getpid():
                    self._pool.close()  # the DSN changed: its connections go with it
                self._pool = _pool.open_pool(dsn, self.pool_size, self.pooler)
                self._pool_pid = os.getpid()
                self._pool_dsn = dsn
            return self._pool

    @contextlib.contextmanager
    def connection(
        self, conn: psycopg.Connection[Any] | None = None
    ) -> Iterator[psycopg.Connection[Any]]:
        """The caller's connection if given, else one from the App's pool (autocommit)."""
        if conn is not None:
            with db.translate_errors(conn):
                yield conn
            return
        try:
            pool = self._get_pool()
            pooled = pool.getconn()
        except PoolTimeout:
            raise db.pool_timeout(self.dsn) from None
        # the pool's connection() without its context managers (see pgqueue.db.pool)
        try:
            yield pooled
        except BaseException as exc:
            _pool.settle(pooled, failed=True)
            friendly = db.translated(exc, pooled)
            if friendly is not None:
                raise friendly from None
            if isinstance(exc, PoolTimeout):  # the block's own pool wait
                raise db.pool_timeout(self.dsn) from None
            raise
        else:
            _pool.settle(pooled, failed=False)
        finally:
            pool.putconn(pooled)

    def caller_connection(
        self, conn: psycopg.Connection[Any] | None = None
    ) -> psycopg.Connection[Any] | None:
        """`conn`, else the connection of the caller's open transaction as reported by
        `connection_provider` (the Django and Flask integrations install one), else None:
        enqueues and events join that transaction without conn=."""
        if conn is None and self.connection_provider is not None:
            return self.connection_provider()
        return conn

    def close(self) -> None:
        """Close the App's pools (sync and async, see close_async_pool) and the waiters'
        shared connection; each opens again at next use."""
        self.close_async_pool()
        waiters = self.__dict__.pop("_waiters", None)
        if waiters is not None:
            waiters.close()
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def migrate(self) -> None:
        """Create or update the pgqueue schema (same as `pgqueue migrate`)."""
        migrate.upgrade(self.dsn)

    def check_schema(self) -> None:
        """Raise NotMigrated unless the database schema matches this pgqueue version."""
        with self.connection() as conn:
            migrate.check(conn)

    def insert_runs(
        self, rows: Sequence[RunRow], *, conn: psycopg.Connection[Any] | None = None
    ) -> list[RunHandle]:
        """Insert prepared rows with one statement; the engine behind every enqueue."""
        if not rows:
            return []
        batch = _batches.active(self)
        if batch is not None:  # inside app.batch(): its transaction, its id on the runs
            caller: psycopg.Connection[Any] | None = batch.connection(conn)
            deferrer = None
        else:
            caller = self.caller_connection(conn)
            deferrer = self.enqueue_deferrer if caller is None else None
        batch_id = None if batch is None else batch.id
        if self.tracing is not None:
            # A deferred enqueue's span is the caller's enqueue (its runs' ids come later).
            with self.tracing.enqueue(rows) as traced:
                deferred = deferrer(self, rows, traced.headers) if deferrer else None
                if deferred is not None:
                    return deferred
                return traced(self.insert_now(rows, caller, traced.headers, batch_id))
        deferred = deferrer(self, rows, None) if deferrer else None
        if deferred is not None:
            return deferred
        return self.insert_now(rows, caller, None, batch_id)

    def insert_now(
        self,
        rows: Sequence[RunRow],
        caller: psycopg.Connection[Any] | None,
        headers: str | None,
        batch_id: int | None = None,
    ) -> list[RunHandle]:
        """Insert on `caller` (or a pooled connection) now, with the given trace headers
        (and batch): no deferral, no span (an enqueue deferred to a commit is written by
        this)."""
        op = _inserts.Insert(self, rows, headers, batch_id)
        with self.connection(caller) as c:
            found = op.found(c.execute(op.query, op.params).fetchone())
            lookup = op.lookup(found)
            existing = c.execute(*lookup).fetchall() if lookup else []
        return op.handles(found, existing)

    # -- batches ------------------------------------------------------------------------

    def batch(
        self,
        on_complete: Task[Any, Any],
        kwargs: Mapping[str, Any] | None = None,
        *,
        conn: psycopg.Connection[Any] | None = None,
    ) -> AbstractContextManager[_batches.Batch]:
        """`with app.batch(on_complete=task, kwargs={...}) as batch:` collects the runs
        enqueued in the block (one transaction: `conn`'s, else its own) and enqueues
        `task(batch={...counts}, **kwargs)` once when the last of them is terminal
        (pgqueue.batches)."""
        return _batches.open_batch(self, on_complete, kwargs, conn)

    def get_batch(self, batch_id: int) -> _batches.BatchState:
        return _batches.get_batch(self, batch_id)

    # -- events -------------------------------------------------------------------------

    def emit_event(
        self,
        event: str,
        *,
        key: str | None = None,
        payload: Any = None,
        delay: float | None = None,
        conn: psycopg.Connection[Any] | None = None,
    ) -> int:
        """Emit an event: wakes every workflow waiting for (event, key) at once, or after
        `delay` seconds. Joins the caller's transaction with `conn=`. Returns its id."""
        params = _enqueue.event_params(self, event, key, payload, delay)
        with self.connection(self.caller_connection(conn)) as c:
            return _enqueue.emit_event(c, params)

    # -- workers ------------------------------------------------------------------------

    def served_queues(self) -> list[str]:
        """Queues a worker serves by default: the declared ones and those of its tasks."""
        return sorted({self.default_queue, *self.queues, *(t.queue for t in self.tasks.values())})

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
        # group, app, lease, durable, progress, cancelled, cancel event, worker): half the
        # cost of keywords, once per claimed run
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
            self,
            run.lease_token,
            None,
            None,
            False,
            None,
            worker_id,
        )
