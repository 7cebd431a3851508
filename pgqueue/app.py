"""App: the registry of tasks and queues, and the entry point to the database."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

import psycopg
from psycopg_pool import PoolTimeout

from pgqueue import _enqueue, _inserts, _inspect, _json, _operator, _pool, _registry, db, migrate
from pgqueue import batches as _batches
from pgqueue import retention as _retention
from pgqueue import schedules as _schedules
from pgqueue._bulk import BulkActions
from pgqueue._checks import check_name
from pgqueue._registry import LIMIT_MAX, QueueConfig
from pgqueue.aio import AsyncApp
from pgqueue.context import Context
from pgqueue.errors import OutOfRange
from pgqueue.runs import Run, RunHandle
from pgqueue.tasks import RunRow, Task

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
# Takes over an enqueue that cannot join the caller's open transaction (see App.insert_runs).
EnqueueDeferrer = Callable[["App", Sequence[RunRow]], "list[RunHandle] | None"]
# Returns the DSN to use now (see App.dsn_source).
DsnSource = Callable[[], str]
# Calls a worker's sync call (task, workflow, hook) for a run and returns its result; see
# App.sync_wrappers.
SyncWrapper = Callable[[Context, Callable[[], Any]], Any]


class App(BulkActions, AsyncApp):
    """Registry of tasks and queues bound to one database.

    A façade over small parts: the registry (pgqueue._registry), enqueues by name and
    events (_enqueue), operator actions (_operator; bulk ones, _bulk), inspection
    (_inspect), opening the pool (_pool), the async calls (pgqueue.aio). insert_runs
    and connection(), on every Task.enqueue's path, are written out here so that it
    takes no call more.

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
        from pgqueue import embedded

        app = cls(embedded.ensure_server(), **kwargs)
        app.migrate()
        return app

    def queue(
        self, name: str, *, concurrency: int | None = None, group_concurrency: int | None = None
    ) -> QueueConfig:
        """Declare a queue and its limits (stored in pgqueue.queues when a worker starts)."""
        return _registry.declare_queue(self.queues, name, concurrency, group_concurrency)

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
        on_success(ctx, result), on_failure(ctx, exc).
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
            with self._get_pool().connection() as pooled, db.translate_errors(pooled):
                yield pooled
        except PoolTimeout:
            raise db.pool_timeout(self.dsn) from None

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
        """Close the App's pool and the waiters' shared connection (opened again on use)."""
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
        else:
            caller = self.caller_connection(conn)
            if caller is None and self.enqueue_deferrer is not None:
                deferred = self.enqueue_deferrer(self, rows)
                if deferred is not None:
                    return deferred
        batch_id = None if batch is None else batch.id
        if self.tracing is not None:
            with self.tracing.enqueue(rows) as traced:
                return traced(self._insert(rows, caller, traced.headers, batch_id))
        return self._insert(rows, caller, None, batch_id)

    def _insert(
        self,
        rows: Sequence[RunRow],
        caller: psycopg.Connection[Any] | None,
        headers: str | None,
        batch_id: int | None = None,
    ) -> list[RunHandle]:
        op = _inserts.Insert(self, rows, headers, batch_id)
        with self.connection(caller) as c:
            found = c.execute(op.query, op.params).fetchone()
            lookup = op.lookup(found)
            existing = c.execute(*lookup).fetchall() if lookup else []
        return op.handles(found, existing)

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

    def get_run(self, run_id: int, *, conn: psycopg.Connection[Any] | None = None) -> Run:
        with self.connection(conn) as c:
            return _inspect.get_run(c, run_id)

    def list_runs(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 50,
    ) -> list[Run]:
        with self.connection() as c:
            return _inspect.list_runs(c, state=state, queue=queue, task=task, limit=limit)

    def run_errors(self, run_id: int) -> list[dict[str, Any]]:
        with self.connection() as c:
            return _inspect.rows(c, "run_errors", {"id": run_id})

    def cancel(self, run_id: int, *, children: bool = False) -> bool:
        """Cancel a run that has not finished; a running one is told to stop, a waiting
        parent is woken. `children=True` cancels its child runs too. Returns False if the
        run had already finished."""
        with self.connection() as c:
            return _operator.cancel(c, run_id, children=children)

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

    def run_steps(self, run_id: int) -> list[dict[str, Any]]:
        with self.connection() as c:
            return _inspect.rows(c, "run_steps", {"id": run_id})

    def retry(self, run_id: int) -> bool:
        """Queue a finished run again for one more attempt (recorded in run_errors).
        Returns False if the run has not finished."""
        with self.connection() as c:
            return _operator.retry(c, run_id)

    def set_limits(
        self, queue: str, *, concurrency: int | None, group_concurrency: int | None
    ) -> None:
        """Change a queue's cluster-wide limits now (None: no limit); workers apply it to
        their next claim. A worker that starts with app.queue(...) declarations writes
        those back."""
        _registry.check_limits(queue, concurrency, group_concurrency)
        name = check_name("queue", queue)
        with self.connection() as c:
            _operator.set_limits(c, name, concurrency, group_concurrency)

    def groups(self, queue: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
        """The busiest groups (most running, then most queued), from pgqueue.groups."""
        with self.connection() as c:
            return _inspect.rows(c, "busiest_groups", {"queue": queue, "limit": limit})

    def set_paused(self, queue: str, paused: bool) -> None:
        with self.connection() as c:
            _operator.set_paused(c, queue, paused)

    def queue_summary(self) -> list[dict[str, Any]]:
        with self.connection() as c:
            return _inspect.rows(c, "queue_summary")

    def list_workers(self) -> list[dict[str, Any]]:
        with self.connection() as c:
            return _inspect.rows(c, "list_workers")

    # -- schedules ----------------------------------------------------------------------

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
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Enqueue a task at every tick of `cron` (in zone `tz`) with `args`/`kwargs`.

        Put it above `@app.task(...)`, or use it alone (the function is then registered
        as a task with default options). The schedule is named after the task unless
        `name=` is given, which a task with several schedules needs. A bad expression or
        zone raises pgqueue.InvalidSchedule here. See docs/schedules.md."""
        _schedules.check_cron(cron, tz)

        def decorate(target: Callable[P, R]) -> Task[P, R]:
            task: Task[P, R] = target if isinstance(target, Task) else self.task(target)
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

        return decorate

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
        return _registry.add_schedule(self.schedules, name, definition)

    def list_schedules(self) -> list[dict[str, Any]]:
        """Every schedule in the database (those of all apps), by name."""
        with self.connection() as c:
            return _schedules.list_all(c)

    def pause_schedule(self, name: str) -> None:
        with self.connection() as c:
            _schedules.set_paused(c, name, True)

    def resume_schedule(self, name: str) -> None:
        """Resume from the next tick after now (ticks passed while paused do not fire)."""
        with self.connection() as c:
            _schedules.set_paused(c, name, False)

    def trigger_schedule(self, name: str) -> RunHandle:
        """Enqueue one run of schedule `name` now, outside its cron."""
        with self.connection() as c:
            return RunHandle(_schedules.trigger(c, name), self)

    # -- retention ----------------------------------------------------------------------

    def prune(
        self,
        older_than: timedelta | float,
        *,
        states: Sequence[str] = _retention.FINISHED_STATES,
        events: bool = False,
    ) -> dict[str, int]:
        """Delete runs in `states` that finished more than `older_than` (seconds or a
        timedelta) ago, with their steps and errors, and events created before then with
        events=True; in batches. Workers do this on their own (Worker(retention=...)).
        Returns how many rows went, by state (and "events")."""
        age = older_than if isinstance(older_than, timedelta) else timedelta(seconds=older_than)
        with self.connection() as c:
            return _retention.prune(c, age, states=states, events=events)

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

    def make_context(self, run: Claimed) -> Context:
        # positional (run_id, task, queue, attempt, max_attempts, args, kwargs): half the
        # cost of keywords, once per claimed run
        return Context(
            run.id, run.task, run.queue, run.attempt, run.max_attempts, run.args, run.kwargs
        )
