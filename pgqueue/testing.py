"""Helpers for your own test suite.

- `drain(app)` runs every due run in this process with a real worker in burst mode, then
  returns what happened: the tasks' effects are visible when it returns.
- `assert_enqueued(app, task, *args, **kwargs)` / `assert_not_enqueued(...)` check that a
  run of `task` with those arguments exists (or does not).
- `with eager(app): ...` runs tasks at enqueue, in the calling thread, without a worker
  and without touching pgqueue's tables: fast unit tests of code that enqueues. What it
  cannot run inline (workflows, tasks the App does not register) it refuses.

See docs/testing.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import threading
import time
import weakref
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgqueue.app import App
from pgqueue.db import payload as _json
from pgqueue.db import sql as _sql
from pgqueue.errors import UserError
from pgqueue.runs.handle import RunHandle, outcome
from pgqueue.runs.run import Run
from pgqueue.states import RunState
from pgqueue.tasks.task import CONTEXT_ONLY, RunRow, Task
from pgqueue.workflows.context import CURRENT, Context, call_as

__all__ = [
    "EagerRefused",
    "EagerRunHandle",
    "assert_enqueued",
    "assert_not_enqueued",
    "drain",
    "drain_async",
    "eager",
]

# -- drain --------------------------------------------------------------------------------


def drain(
    app: App,
    *,
    queues: Sequence[str] | None = None,
    concurrency: int = 1,
    timeout: float = 60.0,
) -> Counter[str]:
    """Run the app's due runs (committed ones: a worker has its own connections) until
    nothing is due, with a real worker in this process. Returns counts of what happened
    ("succeeded", "failed", "scheduled" for a retry later...). Runs due later (a delay, a
    retry's backoff, a durable sleep) stay where they are.

    Works from plain and from async tests (the worker gets a thread of its own)."""
    worker = _burst_worker(app, queues, concurrency)
    failure: list[BaseException] = []

    def target() -> None:
        try:
            worker.run(burst=True)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, name="pgqueue-drain", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop()
        thread.join(30)
        raise TimeoutError(
            f"drain: runs were still due after {timeout:g}s (a task that keeps retrying?); "
            f"so far: {dict(worker.stats)}"
        )
    if failure:
        raise failure[0]
    return Counter(worker.stats)


async def drain_async(
    app: App, *, queues: Sequence[str] | None = None, concurrency: int = 1
) -> Counter[str]:
    """drain() on the running event loop (async tasks then share the test's loop)."""
    worker = _burst_worker(app, queues, concurrency)
    await worker.run_async(burst=True)
    return Counter(worker.stats)


def _burst_worker(app: App, queues: Sequence[str] | None, concurrency: int) -> Any:
    return app.worker(
        queues=list(queues) if queues else None,
        concurrency=concurrency,
        install_signal_handlers=False,
        poll_interval=0.05,
        stage_interval=0.05,
        grace=5.0,
    )


# -- assertions ---------------------------------------------------------------------------


def assert_enqueued(app: App, task: Task[Any, Any] | str, /, *args: Any, **kwargs: Any) -> int:
    """Assert that a run of `task` with exactly these arguments exists (in any state), and
    return its id (the newest if several). With no arguments given, any run of `task`
    matches. Inside a Django/Flask transaction that pgqueue joins, uncommitted runs count."""
    matches, seen = _find(app, task, args, kwargs)
    if not matches:
        raise AssertionError(_describe(task, args, kwargs, seen, "no such run was enqueued"))
    return matches[0]


def assert_not_enqueued(app: App, task: Task[Any, Any] | str, /, *args: Any, **kwargs: Any) -> None:
    """Assert that no run of `task` with these arguments (any, if none given) exists."""
    matches, seen = _find(app, task, args, kwargs)
    if matches:
        raise AssertionError(_describe(task, args, kwargs, seen, f"found run(s) {matches}"))


def _find(
    app: App, task: Task[Any, Any] | str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[int], list[tuple[int, str, Any, Any]]]:
    name = task if isinstance(task, str) else task.name
    what = f"the arguments expected for task {name!r}"
    args_text = _json.dumps(list(args), what=what)
    kwargs_text = _json.dumps(kwargs, what=what)
    anything = not args and not kwargs
    params = {
        "task": name,
        "any": anything,
        "args": args_text,
        "kwargs": kwargs_text,
        "limit": 50,
    }
    with app.connection(app.caller_connection()) as c, c.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_sql.query("testing_find_runs"), params).fetchall()
    matches = [r["id"] for r in rows if r["matches"]]
    seen = [(r["id"], r["state"], json.loads(r["args"]), json.loads(r["kwargs"])) for r in rows]
    want_args, want_kwargs = json.loads(args_text), json.loads(kwargs_text)
    for run in reversed(_eager_runs(app)):
        if run.task != name:
            continue
        if anything or (run.args == want_args and run.kwargs == want_kwargs):
            matches.append(run.id)
        seen.append((run.id, f"{run.state}, eager", run.args, run.kwargs))
    return matches, seen


def _describe(
    task: Task[Any, Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    seen: list[tuple[int, str, Any, Any]],
    verdict: str,
) -> str:
    name = task if isinstance(task, str) else task.name
    wanted = "any arguments" if not args and not kwargs else f"args={list(args)} kwargs={kwargs}"
    lines = [f"run of task {name!r} with {wanted}: {verdict}."]
    if seen:
        lines.append(f"Runs of {name!r} (newest first):")
        lines += [f"  #{i} ({state}) args={a} kwargs={k}" for i, state, a, k in seen[:10]]
    else:
        lines.append(f"No run of {name!r} exists.")
    return "\n".join(lines)


# -- eager mode ---------------------------------------------------------------------------


class EagerRefused(UserError, RuntimeError):
    """An enqueue under eager() of what cannot run inline: a workflow (its durable steps,
    sleeps and child runs need the database and a worker) or a task the App does not
    register."""


@dataclass(frozen=True)
class EagerRunHandle(RunHandle):
    """What enqueue returns in eager mode: the run already happened, in memory. Its id is
    negative (it was never a row of pgqueue.runs), so app.get_run() does not know it; use
    handle.get() and handle.wait()."""

    run: Run | None = None

    def get(self) -> Run:
        assert self.run is not None
        return self.run

    async def get_async(self) -> Run:
        return self.get()

    def wait(self, timeout: float | None = None, poll_interval: float = 1.0) -> Any:
        return outcome(self.get())

    async def wait_async(self, timeout: float | None = None, poll_interval: float = 1.0) -> Any:
        return outcome(self.get())


class _EagerLog:
    def __init__(self) -> None:
        self.runs: list[Run] = []
        # unique key -> the inline run holding it (unique_while="retained") and when it was
        # recorded (time.monotonic()): what runs_unique_key_idx would hold
        self.holders: dict[str, tuple[Run, float]] = {}
        self._ids = 0
        self._lock = threading.Lock()

    def next_id(self) -> int:
        with self._lock:
            self._ids -= 1
            return self._ids

    def by_key(self, app: App, row: RunRow) -> EagerRunHandle | None:
        """The earlier eager run holding this unique key or idempotency key, as enqueue
        would find it in the database. An inline run is terminal by the time enqueue
        returns, so under unique_while "queued" or "active" (debounce included) it never
        holds its key; under "retained" it does, until `unique_for` seconds have passed
        (then the key is free again, for the next run to take)."""
        if row.unique_key is not None and (held := self.holders.get(row.unique_key)):
            run, since = held
            if row.unique_for is not None and time.monotonic() - since >= row.unique_for:
                del self.holders[row.unique_key]  # older than the window: out of scope
            else:
                return EagerRunHandle(run.id, app.database, created=False, run=run)
        for run in self.runs:
            if row.idempotency_key is not None and run.idempotency_key == row.idempotency_key:
                return EagerRunHandle(run.id, app.database, created=False, run=run)
        return None

    def record(self, run: Run, row: RunRow) -> None:
        self.runs.append(run)
        if row.unique_key is not None and row.unique_while == "retained":
            self.holders[row.unique_key] = (run, time.monotonic())


_logs: weakref.WeakKeyDictionary[App, _EagerLog] = weakref.WeakKeyDictionary()


def _eager_runs(app: App) -> list[Run]:
    log = _logs.get(app)
    return list(log.runs) if log is not None else []


@contextlib.contextmanager
def eager(app: App, *, propagate: bool = True, enqueue_others: bool = False) -> Iterator[list[Run]]:
    """Within the block, enqueueing a task runs it at once, in this thread (so in the
    caller's transaction and, under Flask, its app context), with its arguments after a
    JSON round trip (as a worker would see them); nothing is written to pgqueue's tables.
    Django's @task functions run too. Yields the list of runs executed so far.

    Idempotency keys and uniqueness scopes apply as the database would apply them to
    runs that are terminal as soon as they are enqueued: an enqueue whose key an earlier
    eager run holds returns that run's handle (`created` False) and runs nothing. Under
    unique_while "queued" or "active" (and so debounce, on_duplicate="replace" and
    "cancel_running") an inline run never holds its key, so every enqueue runs; under
    "retained" it holds it for the rest of the block, or for `unique_for` seconds.

    `propagate=True` re-raises a task's exception from enqueue (the run is recorded
    `failed` either way). Delays and run_at are ignored; there are no retries; a run's
    dependencies (after=) ran before it, and one that failed does not cancel it. A task
    runs at enqueue even inside a transaction that later rolls back. Workflows and tasks
    this app does not register cannot run inline: their enqueue raises EagerRefused, or,
    with `enqueue_others=True`, enqueues them for real (run them with drain()). Child
    runs that a real worker makes (drain() inside the block) are always real."""
    if app in _logs:
        raise RuntimeError("eager() is already active for this app")
    log = _logs[app] = _EagerLog()
    enqueuer = app.enqueuer  # every enqueue of the app ends in its two inserts
    original, original_async = enqueuer.insert_runs, enqueuer.insert_runs_async

    def inline(row: RunRow) -> bool:
        return _runs_eagerly(app, row, enqueue_others)

    def insert_runs(
        rows: Sequence[RunRow], *, conn: psycopg.Connection[Any] | None = None
    ) -> list[RunHandle]:
        real = [r for r in rows if not inline(r)]
        inserted = iter(original(real, conn=conn) if real else [])
        return [_run_eagerly(app, log, r, propagate) if inline(r) else next(inserted) for r in rows]

    async def insert_runs_async(
        rows: Sequence[RunRow], *, conn: psycopg.AsyncConnection[Any] | None = None
    ) -> list[RunHandle]:
        real = [r for r in rows if not inline(r)]
        inserted = iter(await original_async(real, conn=conn) if real else [])
        out: list[RunHandle] = []
        for r in rows:
            if inline(r):
                out.append(await _run_eagerly_async(app, log, r, propagate))
            else:
                out.append(next(inserted))
        return out

    enqueuer.insert_runs = insert_runs  # type: ignore[method-assign]
    enqueuer.insert_runs_async = insert_runs_async  # type: ignore[method-assign]
    try:
        yield log.runs
    finally:
        del enqueuer.insert_runs, enqueuer.insert_runs_async
        _logs.pop(app, None)


def _runs_eagerly(app: App, row: RunRow, enqueue_others: bool) -> bool:
    """Whether eager() runs this row inline (else it is inserted); raises EagerRefused
    for what it cannot run, unless `enqueue_others`."""
    if row.parent_id is not None:
        return False
    task = app.tasks.get(row.task)
    if task is not None and (not task.workflow or getattr(task.fn, CONTEXT_ONLY, False)):
        return True
    if enqueue_others:
        return False
    what = (
        f"task {row.task!r} is not registered on this App"
        if task is None
        else f"{row.task!r} is a workflow (its durable steps, sleeps and child runs need "
        "the database and a worker)"
    )
    raise EagerRefused(
        f"pgqueue.testing.eager() cannot run this inline: {what}; test it with drain(), "
        "or pass eager(app, enqueue_others=True) to enqueue it for real"
    )


def _run_eagerly(app: App, log: _EagerLog, row: RunRow, propagate: bool) -> EagerRunHandle:
    if (earlier := log.by_key(app, row)) is not None:
        return earlier
    task, ctx, args, kwargs = _prepare(app, log, row)
    try:
        result = call_as(ctx, _call_sync, task.fn, task.run_ctx_args(ctx, args), kwargs)
    except Exception as exc:
        return _finish(app, log, task, ctx, row, exc=exc, propagate=propagate)
    return _finish(app, log, task, ctx, row, result=result, propagate=propagate)


async def _run_eagerly_async(
    app: App, log: _EagerLog, row: RunRow, propagate: bool
) -> EagerRunHandle:
    if (earlier := log.by_key(app, row)) is not None:
        return earlier
    task, ctx, args, kwargs = _prepare(app, log, row)
    token = CURRENT.set(ctx)
    try:
        if task.is_async:
            result = await task.fn(*args, **kwargs)
        else:
            result = task.fn(*task.run_ctx_args(ctx, args), **kwargs)
    except Exception as exc:
        return _finish(app, log, task, ctx, row, exc=exc, propagate=propagate)
    finally:
        CURRENT.reset(token)
    return _finish(app, log, task, ctx, row, result=result, propagate=propagate)


def _prepare(
    app: App, log: _EagerLog, row: RunRow
) -> tuple[Task[Any, Any], Context, list[Any], dict[str, Any]]:
    task = app.tasks[row.task]
    args, kwargs = _json.loads(row.args), _json.loads(row.kwargs)
    ctx = Context(
        run_id=log.next_id(),
        task=row.task,
        queue=row.queue,
        attempt=1,
        max_attempts=row.max_attempts,
        args=args,
        kwargs=kwargs,
        priority=row.priority,
        group=row.group_key or None,
    )
    call_args, call_kwargs = task.validate(args, kwargs)  # the validator's values
    return task, ctx, list(call_args), dict(call_kwargs)


def _finish(
    app: App,
    log: _EagerLog,
    task: Task[Any, Any],
    ctx: Context,
    row: RunRow,
    *,
    result: Any = None,
    exc: Exception | None = None,
    propagate: bool,
) -> EagerRunHandle:
    error = None
    if exc is None:
        try:
            text = _json.dumps(
                result,
                what=f"the result of task {task.name!r}",
                limit=app.max_payload_bytes,
                max_depth=app.max_json_depth,
            )
            result = _json.loads(text)
        except (TypeError, ValueError) as bad:
            exc, result = bad, None
    if exc is not None:
        error = f"{type(exc).__name__}: {exc}"
    run = _make_run(ctx, row, result=result, error=error)
    log.record(run, row)
    hook = task.on_success if exc is None else task.on_failure
    if hook is not None:
        value = result if exc is None else error
        with contextlib.suppress(Exception):
            _call_sync(hook, [ctx, value], {})
    if exc is not None and propagate:
        exc.add_note(f"(raised by task {task.name!r}, run eagerly by pgqueue.testing.eager)")
        raise exc
    return EagerRunHandle(ctx.run_id, app.database, run=run)


def _make_run(ctx: Context, row: RunRow, *, result: Any, error: str | None) -> Run:
    now = datetime.now(UTC)
    known: dict[str, Any] = {
        "id": ctx.run_id,
        "task": row.task,
        "queue": row.queue,
        "state": RunState.FAILED if error else RunState.SUCCEEDED,
        "priority": row.priority,
        "args": ctx.args,
        "kwargs": ctx.kwargs,
        "result": result,
        "error": error,
        "attempt": 1,
        "max_attempts": row.max_attempts,
        "timeout_seconds": row.timeout_seconds,
        "group_key": row.group_key,
        "idempotency_key": row.idempotency_key,
        "parent_id": row.parent_id,
        "run_at": now,
        "created_at": now,
        "started_at": now,
        "finished_at": now,
    }
    return Run.from_row(defaultdict(lambda: None, known))  # fields added later: None


def _call_sync(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call fn; an async one runs to completion on a loop of its own (on a helper thread
    when this thread already runs a loop)."""
    if not asyncio.iscoroutinefunction(fn):
        return fn(*args, **kwargs)
    call = functools.partial(fn, *args, **kwargs)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(call())
    box: list[Any] = []

    def target() -> None:
        try:
            box.append((True, asyncio.run(call())))
        except BaseException as exc:
            box.append((False, exc))

    thread = threading.Thread(target=target, name="pgqueue-eager")
    thread.start()
    thread.join()
    ok, value = box[0]
    if not ok:
        raise value
    return value
