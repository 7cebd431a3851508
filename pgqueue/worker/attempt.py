"""One attempt of one run, as steps that each take what they use and return a value: decode
(undecodable), validate (checked), invoke (attempt, attempt_in_thread), classify what
happened into an Outcome (raised, returned) and the hook that follows a written outcome
(hook_for, run_hook). Executor (executor.py) calls them in that order; none calls back
into it."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pgqueue.db import payload as _json
from pgqueue.enqueue.checks import ValidationError
from pgqueue.errors import InvalidArguments, LeaseLost, NonRetryable, RetryAfter
from pgqueue.states import RunState
from pgqueue.tasks.retry import DEFAULT_RETRY, RetryPolicy
from pgqueue.tasks.task import Task
from pgqueue.worker.connection import Undecodable
from pgqueue.worker.records import Held, Outcome
from pgqueue.workflows.async_context import AsyncContext
from pgqueue.workflows.context import CURRENT, Context, call_as
from pgqueue.workflows.durable import Suspend

if TYPE_CHECKING:
    from pgqueue._tracing import Tracing
    from pgqueue.worker._threads import DaemonThreads
    from pgqueue.worker.processes import Processes

log = logging.getLogger("pgqueue.worker")

# Per-run code: the states as plain strings bound once, so that building an outcome and
# testing its state add no attribute lookup and keep the interpreter's fast str paths.
SCHEDULED = RunState.SCHEDULED.value
QUEUED = RunState.QUEUED.value
SUCCEEDED = RunState.SUCCEEDED.value
FAILED = RunState.FAILED.value

SyncWrap = Callable[[Context, Callable[[], Any]], Callable[[], Any]]
# An async attempt's timeout: expire(held, timeout), on the loop (Executor.expire)
Expire = Callable[[Held, float], None]


class Traced(Protocol):
    """Where the app's tracing is (pgqueue.contrib.otel, sentry), read at each attempt:
    instrument() and uninstrument() may set or clear it while a worker runs."""

    tracing: Tracing | None


@dataclass(frozen=True, slots=True)
class Runtime:
    """What an attempt's steps use of the worker and its app, given once per worker."""

    tasks: Mapping[str, Task[Any, Any]]  # the app's tasks, by name
    tasks_label: str  # a few task names, for the message of an unknown task
    max_payload_bytes: int  # a result's limits (the app's)
    max_json_depth: int
    threads: DaemonThreads  # where sync task code runs
    sync_wrappers: Sequence[object]  # the app's: a sync call is wrapped only if any
    wrap_sync: SyncWrap
    traced: Traced  # the app: its `tracing`
    # where sync tasks' code runs instead of `threads` (pgqueue worker --processes N)
    processes: Processes | None = None


class AttemptTimeout(Exception):
    """The attempt ran past its task's timeout."""


def timeout_message(timeout: float) -> str:
    return f"attempt exceeded the task's timeout of {timeout:g}s"


def failure(
    held: Held,
    kind: str,
    exc: BaseException | str,
    *,
    retry: RetryPolicy | None,
    with_traceback: bool = True,
) -> Outcome:
    """A failed attempt: retried after the policy's delay if attempts remain and `retry`
    is given, else the run fails for good."""
    message = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    tb = None
    if with_traceback and isinstance(exc, BaseException):
        tb = "".join(traceback.format_exception(exc))
    cause = exc if isinstance(exc, BaseException) else None
    attempt, max_attempts = held.row.attempt, held.row.max_attempts
    if retry is not None and attempt < max_attempts:
        return Outcome(
            held.id,
            held.lease_token,
            SCHEDULED,
            error=message,
            error_kind=kind,
            traceback=tb,
            delay=retry.delay(attempt),
            exception=cause,
        )
    return Outcome(
        held.id,
        held.lease_token,
        FAILED,
        error=message,
        error_kind=kind,
        traceback=tb,
        exception=cause,
    )


def undecodable(held: Held) -> Outcome | None:
    """The failure, at once and for good, of a run whose stored arguments could not be
    decoded (another attempt would fail the same way); None for any other run."""
    row = held.row
    args: Any = row.args  # typed as the loader gives them when it can
    kwargs: Any = row.kwargs
    if type(args) is Undecodable:
        what, bad = "args", args
    elif type(kwargs) is Undecodable:
        what, bad = "kwargs", kwargs
    else:
        return None
    message = f"the run's {what} cannot be decoded: {bad.why}; failed without a retry"
    log.error("run %s (%s): %s", row.id, row.task, message)
    return failure(held, "invalid_arguments", message, retry=None, with_traceback=False)


Arguments = tuple[Sequence[Any], Mapping[str, Any]]


def checked(rt: Runtime, held: Held, task: Task[Any, Any] | None) -> Outcome | Arguments:
    """The arguments the task is called with (its validator's values), or the failure of
    an attempt that cannot start (unknown task, invalid arguments)."""
    row = held.row
    if task is None:
        return failure(
            held,
            "unknown_task",
            f"unknown task {row.task!r}: no task of that name is registered in the app "
            f"this worker runs ({rt.tasks_label}); deploy it or cancel the run",
            retry=DEFAULT_RETRY,
        )
    try:
        return task.validate(row.args, row.kwargs)
    except (TypeError, ValidationError) as exc:
        return failure(held, "invalid_arguments", exc, retry=None, with_traceback=False)


def raised(held: Held, task: Task[Any, Any], exc: BaseException) -> Outcome | None:
    """The outcome of an attempt whose task raised `exc` (None: write nothing). Any
    BaseException: Suspend and LeaseLost are ours (a task's own `except Exception` must
    not swallow them); SystemExit, KeyboardInterrupt or another one from task code fails
    the attempt (kind `error`) and never reaches the worker."""
    if isinstance(exc, BaseExceptionGroup):
        exc = _ours(exc)
    if isinstance(exc, Suspend):
        return Outcome(
            held.id,
            held.lease_token,
            exc.state,
            delay=exc.delay,
            refund=True,
            wait_event=exc.wait_event,
            wait_key=exc.wait_key,
            wait_since=exc.wait_since,
            wait_run_id=exc.wait_run_id,
            wake_at=exc.wake_at,
        )
    if isinstance(exc, LeaseLost):
        held.lost = True
        return None
    if isinstance(exc, RetryAfter):
        return retry_after(held, exc, task)
    if isinstance(exc, (NonRetryable, InvalidArguments, ValidationError)):
        # Deterministic failures: another attempt would fail the same way.
        return failure(held, "non_retryable", exc, retry=None)
    if held.lost or held.released:
        return None
    if isinstance(exc, AttemptTimeout):
        held.stop()
        return failure(held, "timeout", exc, retry=task.retry, with_traceback=False)
    return failure(held, "error", exc, retry=task.retry)


def retry_after(held: Held, exc: RetryAfter, task: Task[Any, Any]) -> Outcome:
    """The run again after exc.seconds, its attempt given back; with scope "group" or
    "queue", its group or queue backed off until then (complete.sql). A group backoff of a
    run without a group is a mistake in the task: an error, retried as any other."""
    if exc.scope == "group" and not held.row.group_key:  # a claim gives "" for none
        message = (
            f"RetryAfter(scope='group') in run {held.id} of task {held.row.task}, which has "
            "no group: give the task a group= or raise RetryAfter(scope='queue')"
        )
        return failure(held, "error", message, retry=task.retry)
    if exc.seconds <= 0:
        return Outcome(held.id, held.lease_token, QUEUED, refund=True)
    backoff = None if exc.scope == "run" else exc.scope
    return Outcome(
        held.id, held.lease_token, SCHEDULED, delay=exc.seconds, refund=True, backoff=backoff
    )


def _ours(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What an exception group from an async workflow's asyncio.TaskGroup means: a lost
    lease if any operation found it lost; a durable wait if waits are all it holds (the
    first one: a replay meets the others again); else the group, a failure."""
    lost = group.subgroup(LeaseLost)
    if lost is not None:
        return _first(lost)
    waits, others = group.split(Suspend)
    if waits is not None and others is None:
        return _first(waits)
    return group


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def returned(rt: Runtime, held: Held, task: Task[Any, Any], result: Any) -> Outcome | None:
    """The outcome of an attempt whose task returned `result` (None: write nothing)."""
    if held.lost or held.released:
        return None
    if result is None:  # the common case: nothing to encode or to measure
        return Outcome(held.id, held.lease_token, SUCCEEDED, result="null")
    try:
        text = _json.dumps(
            result,
            what=f"the result of task {task.name!r}",
            limit=rt.max_payload_bytes,
            max_depth=rt.max_json_depth,
        )
    except (TypeError, ValueError) as exc:
        return failure(held, "bad_result", exc, retry=None, with_traceback=False)
    return Outcome(held.id, held.lease_token, SUCCEEDED, result=text)


async def attempt(
    rt: Runtime, held: Held, task: Task[Any, Any] | None, expire: Expire
) -> Outcome | None:
    """Run one attempt in the worker's asyncio task for it (an async task, or a sync one
    with a hook). None means: write nothing (lease lost, canceled or released). `expire`
    is called on the loop if an async task runs past its timeout."""
    ctx: Context = held.ctx
    found = checked(rt, held, task)
    if type(found) is Outcome or task is None:
        return found  # type: ignore[return-value]
    args, kwargs = found  # type: ignore[misc]
    try:
        if task.is_async:  # inline, not a helper coroutine: one frame less per run
            # this attempt's own asyncio task (Executor.execute): its own context
            CURRENT.set(ctx)
            if task.workflow:
                if task.version is not None:
                    check = functools.partial(ctx.durable.check_version, task.name, task.version)
                    await _in_thread(rt, ctx, check)
                args = [
                    AsyncContext(ctx, ctx.durable, functools.partial(_in_thread, rt, ctx)),
                    *args,
                ]
            coro = task.fn(*args, **kwargs)
            try:
                result = await _await_async(held, coro, held.row.timeout_seconds, expire)
            finally:
                writer = ctx.progress_writer
                if writer is not None and writer.dirty:
                    await asyncio.to_thread(writer.flush)
        else:
            result = await _invoke_in_thread(rt, held, task, args, kwargs)
    except asyncio.CancelledError:
        if held.lost or held.released:
            return None
        raise
    except GeneratorExit:  # the coroutine is being closed (a task left behind at exit)
        raise
    except BaseException as exc:  # SystemExit, KeyboardInterrupt too: see raised()
        return raised(held, task, exc)
    return returned(rt, held, task, result)


async def traced(
    tracing: Tracing, held: Held, attempt: Awaitable[Outcome | None]
) -> Outcome | None:
    """An attempt (attempt(), or a child process's) inside the app's attempt span
    (pgqueue.contrib.otel): the task's own spans are its children, and the span records
    the outcome."""
    with tracing.attempt(held) as span:
        return span.ended(await attempt)


def attempt_in_thread(rt: Runtime, held: Held, task: Task[Any, Any]) -> Outcome | None:
    """attempt() for a sync task, run wholly in the worker thread that calls the task:
    no asyncio task or future per run, and the outcome built off the event loop. Its
    timeout is kept by the loop (Executor.time_out), which writes the failure while this
    thread runs on. None means: write nothing."""
    found = checked(rt, held, task)
    if type(found) is Outcome:
        return found
    args, kwargs = found  # type: ignore[misc]
    try:
        result = _call(rt, held, task, args, kwargs)()
    except BaseException as exc:  # SystemExit, KeyboardInterrupt too: this run's failure
        return raised(held, task, exc)
    return returned(rt, held, task, result)


def _call(
    rt: Runtime,
    held: Held,
    task: Task[Any, Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Callable[[], Any]:
    """A sync task's call for this attempt, inside the app's sync wrappers, with its
    Context as pgqueue.current() (and its last progress report written at the end)."""
    ctx: Context = held.ctx
    call = functools.partial(call_as, ctx, task.fn, *task.run_ctx_args(ctx, args), **kwargs)
    if task.workflow and task.version is not None:
        call = functools.partial(_versioned, ctx, task.name, task.version, call)
    if rt.traced.tracing is not None:  # a thread of the pool: in the attempt span's context
        call = functools.partial(contextvars.copy_context().run, call)
    return rt.wrap_sync(ctx, call) if rt.sync_wrappers else call


def _versioned(ctx: Context, workflow: str, version: str, call: Callable[[], Any]) -> Any:
    """A versioned workflow's call: its run's version checked (or recorded) first."""
    ctx.durable.check_version(workflow, version)
    return call()


def _in_thread(rt: Runtime, ctx: Context, fn: Callable[[], Any]) -> asyncio.Future[Any]:
    """An async workflow's blocking work (its durable writes, a sync step's function) in
    a worker thread, with the attempt's context variables and inside the app's sync
    wrappers, as a sync workflow's code runs."""
    call: Callable[[], Any] = functools.partial(contextvars.copy_context().run, fn)
    return rt.threads.submit(rt.wrap_sync(ctx, call) if rt.sync_wrappers else call)


async def _invoke_in_thread(
    rt: Runtime,
    held: Held,
    task: Task[Any, Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Any:
    """A sync task with a hook (attempt_in_thread runs those without one): the call in a
    thread, awaited here."""
    timeout = held.row.timeout_seconds
    held.invocation = rt.threads.submit(_call(rt, held, task, args, kwargs))
    if timeout is None:
        return await held.invocation  # nothing cancels the attempt's asyncio task
    # A thread cannot be stopped: on timeout we stop waiting, flag ctx.cancelled, and
    # the slot stays busy until the function returns.
    try:
        return await asyncio.wait_for(asyncio.shield(held.invocation), timeout)
    except TimeoutError:
        if held.invocation.done() and not held.invocation.cancelled():
            raise  # the task itself raised TimeoutError (a socket timeout, say)
        raise AttemptTimeout(timeout_message(timeout)) from None


async def _await_async(
    held: Held, coro: Coroutine[Any, Any, Any], timeout: float | None, expire: Expire
) -> Any:
    """Await an async task's coroutine in the attempt's own asyncio task (no task of its
    own: one less per run, and a coroutine that does not suspend finishes at once).
    Held.stop() cancels the attempt's task while `held.awaiting` is set, i.e. only while
    the task's code runs; attempt() then writes nothing (the run is lost or released, or
    its timeout's failure was handed in by `expire`)."""
    # the attempt's own task (Executor.execute), known without asking the loop
    current = held.task if held.task is not None else asyncio.current_task()
    held.awaiting = current
    # Not asyncio.timeout: a coroutine that swallows the CancelledError would then never
    # have its timeout recorded. The timer writes the failure whatever the code does.
    timer = None
    if timeout is not None:
        timer = asyncio.get_running_loop().call_later(timeout, expire, held, timeout)
    try:
        return await coro
    except asyncio.CancelledError:
        if (held.lost or held.released) and current is not None:
            current.uncancel()  # our own stop(), handled by attempt(): not the task's end
        raise
    finally:
        held.awaiting = None
        if timer is not None:
            timer.cancel()


def hooked(task: Task[Any, Any] | None, outcome: Outcome) -> bool:
    """A hook of the run's task follows this outcome's write."""
    if task is None or not task.has_hooks:
        return False  # most tasks: no hook at all, decided without a call
    return hook_for(task, outcome) is not None


def hook_for(task: Task[Any, Any], outcome: Outcome) -> tuple[str, Any] | None:
    """The hook that follows `outcome` once written, if the task has it: on_success and
    on_failure after the last attempt, on_retry after a failed one that will be retried
    (a failure rescheduled; not a RetryAfter or a durable wait, which fail nothing)."""
    state = outcome.state
    if state == SUCCEEDED:
        return None if task.on_success is None else ("on_success", task.on_success)
    if state == FAILED:
        return None if task.on_failure is None else ("on_failure", task.on_failure)
    if state == SCHEDULED and outcome.error_kind is not None and task.on_retry is not None:
        return "on_retry", task.on_retry
    return None


async def run_hook(rt: Runtime, held: Held, task: Task[Any, Any], outcome: Outcome) -> None:
    """on_success / on_failure / on_retry, once the outcome's write is confirmed. Their
    errors are logged and never change the run's outcome."""
    found = hook_for(task, outcome)
    if found is None:
        return
    which, hook = found
    ctx: Context = held.ctx
    value = _json.loads(outcome.result or "null") if which == "on_success" else outcome.error
    try:
        if asyncio.iscoroutinefunction(hook):
            token = CURRENT.set(ctx)
            try:
                await hook(ctx, value)
            finally:
                CURRENT.reset(token)
        else:
            call = functools.partial(call_as, ctx, hook, ctx, value)
            await rt.threads.submit(rt.wrap_sync(ctx, call) if rt.sync_wrappers else call)
    except (asyncio.CancelledError, GeneratorExit):
        raise
    except BaseException:  # SystemExit, KeyboardInterrupt too: task code cannot stop us
        log.exception(
            "run %s: %s hook of task %s raised (the run's outcome stands)",
            held.id,
            which,
            task.name,
        )
