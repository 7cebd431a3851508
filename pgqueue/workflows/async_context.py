"""What an `async def` workflow receives first: the run's facts as on its Context, and the
durable operations as coroutines, awaited on the worker's event loop.

The operations are the sync workflow's own (Durable, fanout): the same records, memos,
lease fencing and Suspend. What differs is only where their work runs. Their database
writes are blocking calls through the App's pool, so they run in the worker's threads
(`in_thread`) and the loop awaits them; a step's function runs on the loop if it is a
coroutine function, in a thread otherwise. Each operation takes its unique name (`name`,
`name#2`...) when it is called, before anything is awaited: operations started together
(`asyncio.gather`) are numbered in the order they are written, on every replay.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pgqueue.enqueue.checks import check_seconds
from pgqueue.states import StepState
from pgqueue.workflows.context import Context, sleep_spec, sleep_until_spec
from pgqueue.workflows.determinism import step_call
from pgqueue.workflows.fanout import map_children

if TYPE_CHECKING:
    from pgqueue.db.database import Database
    from pgqueue.runs.handle import RunHandle
    from pgqueue.tasks.task import Task
    from pgqueue.workflows.durable import Durable

# Runs a blocking call in a thread (with the caller's context variables: the run's
# Context as pgqueue.current(), a tracing span) and returns its result to the loop.
InThread = Callable[[Callable[[], Any]], Awaitable[Any]]


class AsyncContext:
    """The Context of an `async def` workflow's attempt: `ctx.run_id`, `ctx.attempt`...
    as on `pgqueue.Context`, and `await ctx.step(...)`, `await ctx.sleep(...)`,
    `await ctx.wait_for_event(...)`, `await ctx.call(...)`, `await ctx.map(...)`,
    `await ctx.spawn(...)`, `await ctx.emit_event(...)`. `ctx.context` is the attempt's
    `pgqueue.Context` (what `pgqueue.current()` and the hooks get)."""

    __slots__ = ("_durable", "_in_thread", "context")

    def __init__(self, context: Context, durable: Durable, in_thread: InThread) -> None:
        self.context = context
        self._durable = durable
        self._in_thread = in_thread

    def __repr__(self) -> str:
        return f"AsyncContext(run_id={self.run_id}, task={self.task!r}, attempt={self.attempt})"

    # -- the run's facts (as on Context) -----------------------------------------------

    @property
    def run_id(self) -> int:
        return self.context.run_id

    @property
    def task(self) -> str:
        return self.context.task

    @property
    def queue(self) -> str:
        return self.context.queue

    @property
    def attempt(self) -> int:
        return self.context.attempt

    @property
    def max_attempts(self) -> int:
        return self.context.max_attempts

    @property
    def args(self) -> list[Any]:
        return self.context.args

    @property
    def kwargs(self) -> dict[str, Any]:
        return self.context.kwargs

    @property
    def priority(self) -> int:
        return self.context.priority

    @property
    def group(self) -> str | None:
        return self.context.group

    @property
    def cancelled(self) -> bool:
        """True once the run was canceled, timed out, lost its lease or the worker is
        stopping; the workflow is also cancelled for real, at its next await."""
        return self.context.cancelled

    @property
    def database(self) -> Database | None:
        return self.context.database

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """As Context.progress (it does not block: reports are written from a thread)."""
        self.context.progress(done, total, message)

    # -- the durable operations ----------------------------------------------------------

    def step(
        self, name: str, fn: Any, /, *args: Any, timeout: float | None = None, **kwargs: Any
    ) -> Coroutine[Any, Any, Any]:
        """Run `fn(*args, **kwargs)` once for this run and store its JSON result; on later
        attempts return the stored result without calling `fn`. A coroutine function is
        awaited on the loop (cancelled for real by `timeout`); a plain function runs in a
        worker thread (left to finish if it outlives `timeout`). With `timeout`,
        TimeoutError if `fn` takes longer: the step fails, and runs again on the next
        attempt."""
        durable = self._durable
        if timeout is not None:
            timeout = check_seconds("step timeout", timeout, zero=False)
        return self._step(durable.unique_name(name), fn, args, kwargs, timeout)

    async def _step(
        self,
        name: str,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout: float | None,
    ) -> Any:
        durable = self._durable
        if not durable.loaded:
            await self._in_thread(durable.load)
        done = durable.check(name, step_call(fn, args, kwargs))
        if done is not None and done.state == StepState.SUCCEEDED:
            return done.output
        if durable.vouched():
            begun = durable.begin_step(name, later=True)  # no round trip: nothing blocks
        else:
            begun = await self._in_thread(functools.partial(durable.begin_step, name, later=False))
        try:
            try:
                result = await self._body(name, fn, args, kwargs, timeout)
            finally:
                begun.done()  # before the outcome: it lands after a `running` row
        except Exception as exc:
            await self._in_thread(functools.partial(durable.step_failed, name, begun, exc))
            raise
        return await self._in_thread(functools.partial(durable.step_succeeded, name, begun, result))

    async def _body(
        self,
        name: str,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout: float | None,
    ) -> Any:
        """The step's function: awaited on the loop, or called in a thread (and what it
        returns awaited, if it is awaitable: a lambda around a coroutine function)."""
        if inspect.iscoroutinefunction(fn):
            work: Awaitable[Any] = fn(*args, **kwargs)
        else:
            work = self._in_thread(functools.partial(fn, *args, **kwargs))
        if timeout is None:
            result = await work
        else:
            # a thread cannot be stopped: shielded, it is left to finish and its result dropped
            guarded = work if inspect.iscoroutine(work) else asyncio.shield(work)
            try:
                result = await asyncio.wait_for(guarded, timeout)
            except TimeoutError:
                raise TimeoutError(f"step {name!r} did not finish within {timeout:g}s") from None
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _blocking(self, call: Callable[[], Any]) -> Any:
        """A durable operation (named already) in a worker thread, once awaited."""
        return await self._in_thread(call)

    def patched(self, change_id: str) -> Coroutine[Any, Any, bool]:
        """As Context.patched: `if await ctx.patched("send-receipt"): ...new code...`. The
        point it asks about is where it is called (before anything is awaited)."""
        durable = self._durable
        return self._blocking(
            functools.partial(durable.patched, change_id, durable.next_position())
        )

    def deprecate_patch(self, change_id: str) -> Coroutine[Any, Any, None]:
        """As Context.deprecate_patch."""
        return self._blocking(functools.partial(self._durable.deprecate_patch, change_id))

    def emit_event(
        self,
        name: str,
        event: str,
        *,
        key: str | None = None,
        payload: Any = None,
        delay: float | None = None,
    ) -> Coroutine[Any, Any, int]:
        """Emit an event as a step: once per run, whatever the replays. Its id."""
        durable = self._durable
        return self._blocking(
            functools.partial(
                durable.emit_event, durable.unique_name(name), event, key, payload, delay
            )
        )

    def sleep(self, name: str, seconds: float | timedelta) -> Coroutine[Any, Any, None]:
        """Sleep durably: the attempt ends, the worker is freed, and the run resumes (from
        the top, its steps memoized) after `seconds`."""
        durable = self._durable
        spec = sleep_spec(seconds)
        return self._blocking(
            functools.partial(durable.sleep_until, durable.unique_name(name), spec)
        )

    def sleep_until(self, name: str, when: datetime) -> Coroutine[Any, Any, None]:
        durable = self._durable
        spec = sleep_until_spec(when)
        return self._blocking(
            functools.partial(durable.sleep_until, durable.unique_name(name), spec)
        )

    def wait_for_event(
        self, name: str, *, event: str, key: str | None = None, timeout: float | None = None
    ) -> Coroutine[Any, Any, Any]:
        """Wait durably for `event` (with `key`) emitted after the wait began: its
        payload, or None after `timeout` seconds."""
        durable = self._durable
        return self._blocking(
            functools.partial(
                durable.wait_for_event, durable.unique_name(name), event, key, timeout
            )
        )

    def call(
        self,
        name: str,
        task: Task[Any, Any],
        /,
        *args: Any,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, Any]:
        """Run `task` as a child run and wait durably for its result (as Context.call)."""
        durable = self._durable
        return self._blocking(
            functools.partial(durable.call, durable.unique_name(name), task, args, kwargs, timeout)
        )

    def map(
        self,
        name: str,
        task: Task[Any, Any],
        items: Iterable[Any],
        /,
        *,
        return_exceptions: bool = False,
    ) -> Coroutine[Any, Any, list[Any]]:
        """One child run of `task` per item, waited for durably (as Context.map)."""
        durable = self._durable
        return self._blocking(
            functools.partial(
                map_children, durable, durable.unique_name(name), task, items, return_exceptions
            )
        )

    def spawn(
        self, name: str, task: Task[Any, Any], /, *args: Any, **kwargs: Any
    ) -> Coroutine[Any, Any, RunHandle]:
        """Start `task` as a child run without waiting. Idempotent per run and name."""
        durable = self._durable
        return self._blocking(
            functools.partial(durable.spawn, durable.unique_name(name), task, args, kwargs)
        )
