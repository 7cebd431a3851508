"""The executor: the one owner of a claimed run's life, from the row the producer hands it
(start) to the outcome the completer writes, its slot free and its permit released.
Async attempts run in an asyncio task on the loop; sync attempts of tasks without hooks
run wholly in a worker thread (no asyncio task per run), or, with child processes
(processes.py), in an asyncio task that waits for the child; timeouts, hooks, lost leases,
runs whose arguments cannot be decoded and the permits of threads that outlive their
attempt are all kept here. The attempt's steps (validate, call the task, turn what
happened into an Outcome, the hook) are attempt.py's functions, which return values."""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pgqueue.worker import attempt as _attempt
from pgqueue.worker._completer import Completer
from pgqueue.worker._permits import ZombiePermits
from pgqueue.worker._transitions import Transitions
from pgqueue.worker.attempt import Runtime
from pgqueue.worker.records import Claimed, Held, Outcome

if TYPE_CHECKING:
    from pgqueue.tasks.task import Task
    from pgqueue.workflows.context import Context
    from pgqueue.workflows.durable import Durable

log = logging.getLogger("pgqueue.worker")

# The attempt's context for a claimed run: make_context(row, worker_id) (the app's)
MakeContext = Callable[[Claimed, UUID], "Context"]


def task_starter(
    loop: asyncio.AbstractEventLoop,
) -> Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]:
    """How Executor.start starts an attempt's asyncio task. On Python 3.12+ the task
    starts eagerly: its first step runs at once, inside the task (asyncio.current_task()
    is the task itself, as it is for any task), and an attempt that finishes without
    suspending never goes through the loop's ready queue, which saves worker CPU on every
    run (bench/RESULTS.md). On 3.11 there is no correct way to do that (a task cannot be
    created without being scheduled), so it is the loop's own create_task
    (asyncio.create_task would look the loop up and name the task, per run)."""
    if sys.version_info >= (3, 12):
        return functools.partial(asyncio.Task, loop=loop, eager_start=True)
    return loop.create_task


class Executor:
    """Runs the attempts this worker holds (`held`), their sync code in `runtime.threads`.
    `freed()` is called whenever a slot frees (the producer's wake: it claims into it);
    `make_context` and `make_durable` build an attempt's Context and, for a workflow, its
    stored side (Durable(app, ...) less the app). Outcomes go to `completer`; the permits
    of threads that outlive their attempt to `permits`; `stopping` is set once the worker
    stops. Built on the event loop it runs attempts on."""

    def __init__(
        self,
        runtime: Runtime,
        worker_id: UUID,
        lease_seconds: float,
        stats: Counter[str],
        transitions: Transitions,
        make_context: MakeContext,
        make_durable: Callable[..., Durable],
        freed: Callable[[], None],
        completer: Completer,
        permits: ZombiePermits,
        stopping: asyncio.Event,
    ) -> None:
        self.runtime = runtime
        self.tasks = runtime.tasks
        self.threads = runtime.threads
        self.worker_id = worker_id
        self.stats = stats
        self.transitions = transitions
        self.make_context = make_context
        self.make_durable = make_durable
        self.freed = freed
        self.lease_seconds = lease_seconds
        self.completer = completer
        self.permits = permits
        self.stopping = stopping
        self._loop = asyncio.get_running_loop()
        self._start_task = task_starter(self._loop)
        # Attempts this process holds (a run retried onto this worker while an abandoned
        # thread of its previous attempt still runs is in it twice, as two attempts).
        self.held: set[Held] = set()
        # Every attempt's coroutine until its outcome is handed to the completer, or
        # written if something follows the write (a hook, a thread still running).
        self.executing: set[asyncio.Task[None]] = set()
        # Attempts running wholly in a thread (no asyncio task: see start_in_thread), and
        # what shutdown.drain() waits on until none is left that still owns its run.
        self.in_threads: set[Held] = set()
        self.threaded: dict[str, bool] = {}  # task name: its attempts run in a thread
        # set while draining (quiet_threads), done once no thread attempt owes an outcome
        self.threads_quiet: asyncio.Future[None] | None = None
        self._expire = self.expire  # bound once: not a method object made per run

    # -- the hand-over -----------------------------------------------------------------

    def start(self, claimed: Claimed) -> None:
        """Take over a claimed run (the producer's hand-over): it holds a slot until its
        outcome is handed to the completer (freed() then) and its attempt runs now, wholly
        in a thread (start_in_thread) or in an asyncio task (execute)."""
        held = Held(
            claimed.id, claimed.lease_token, claimed, self.make_context(claimed, self.worker_id)
        )
        self.transitions.started(held)
        refused = _attempt.undecodable(held)
        if refused is not None:
            held.submitted = True
            self.completer.post(refused, held)
            return
        self.held.add(held)
        name = claimed.task
        task = self.tasks.get(name)
        if task is not None and task.workflow:
            held.ctx.durable = self.make_durable(
                claimed.id,
                claimed.lease_token,
                claimed.attempt,
                has_steps=claimed.has_steps,
                holds=functools.partial(self.holds, held),
            )
        in_thread = self.threaded.get(name)
        if in_thread is None:  # once per task name (a dict lookup per run after that)
            # wholly in a thread: a sync task with no hook (a hook runs after the write,
            # from the event loop), unless its code runs in a child process (then its
            # attempt is an asyncio task that waits for the child, as for an async task)
            processes = self.runtime.processes
            in_thread = (
                task is not None
                and not task.is_async
                and not task.has_hooks
                and (processes is None or not processes.takes(task))
            )
            self.threaded[name] = in_thread
        if in_thread:
            self.start_in_thread(held)
            return
        started = self._start_task(self.execute(held, task))
        if not started.done():  # an eager start (task_starter) may have finished it
            held.task = started
            self.executing.add(started)

    # -- async attempts (and sync ones with a hook), in an asyncio task ----------------

    async def execute(self, held: Held, task: Task[Any, Any] | None) -> None:
        try:
            rt = self.runtime
            tracing = rt.traced.tracing
            processes = rt.processes
            if processes is not None and task is not None and processes.takes(task):
                attempt = processes.outcome(held, task)  # its code in a child process
            else:
                attempt = _attempt.attempt(rt, held, task, self._expire)
            if tracing is None:
                outcome = await attempt
            else:
                outcome = await _attempt.traced(tracing, held, attempt)
            if outcome is None or held.lost:
                if not held.submitted:  # else it timed out, and expire() wrote it
                    self.transitions.finished(held, None, False)
            else:
                held.submitted = True
                inv = held.invocation
                if inv is None or inv.done():
                    # The slot is free while the outcome is written: the next claim
                    # overlaps this completion instead of waiting for it (a limited
                    # queue's permit comes back only when the outcome commits).
                    self.free(held)
                    if not _attempt.hooked(task, outcome):
                        # Nothing left to do here once it is written: the completer
                        # settles it, and this task ends now (no second step per run).
                        self.completer.post(outcome, held)
                        return
                if inv is not None and not inv.done():
                    # timed out, its thread runs on: the permit stays taken (permits.keep)
                    await self.permits.keep(held)
                written = await self.completer.submit(outcome)
                self.transitions.written(held, outcome, written)
                if written and task is not None:
                    await _attempt.run_hook(self.runtime, held, task, outcome)
            inv = held.invocation
            if inv is not None and not inv.done() and not self.stopping.is_set():
                # A timed-out sync task still runs in its thread: the run has moved on,
                # but this slot stays busy until the function returns. Not when stopping:
                # a released run must not keep the process (and its thread) alive.
                await asyncio.wait([inv])
            if self.permits.filed and (inv is None or inv.done()):
                # its code has ended (a thread still running at exit keeps the permit: it
                # goes with the worker's row); held only if filed (permits.keep)
                self.permits.release(held)
        except Exception:
            log.exception("run %s: internal error in the worker", held.id)
        finally:
            self.free(held)
            if held.task is not None:  # this task (set once its first step suspended)
                self.executing.discard(held.task)

    def expire(self, held: Held, timeout: float) -> None:
        """On the loop: an async attempt ran past its task's timeout. Its failure goes to
        the completer now, whether or not the coroutine lets itself be cancelled, and its
        hook follows; its slot stays busy until the coroutine ends (execute frees it)."""
        task = self.tasks.get(held.row.task)
        if held.submitted or held.lost or held.released or task is None:
            return
        exc = _attempt.AttemptTimeout(_attempt.timeout_message(timeout))
        outcome = _attempt.failure(held, "timeout", exc, retry=task.retry, with_traceback=False)
        tracing = self.runtime.traced.tracing
        if tracing is not None:
            tracing.timed_out(held, outcome)
        held.submitted = True
        held.lost = True  # before stop(): the cancellation is ours, and nothing more is written
        held.stop()
        if not _attempt.hooked(task, outcome):
            self.completer.post(outcome, held)
            return
        written = asyncio.ensure_future(self.write_then_hook(held, task, outcome))
        self.executing.add(written)  # shutdown.drain() waits for it, as for any hook
        written.add_done_callback(self.executing.discard)

    async def write_then_hook(
        self, held: Held, task: Task[Any, Any] | None, outcome: Outcome
    ) -> None:
        written = await self.completer.submit(outcome)
        self.transitions.written(held, outcome, written)
        if written and task is not None:
            await _attempt.run_hook(self.runtime, held, task, outcome)

    # -- sync attempts, wholly in their thread -----------------------------------------

    def start_in_thread(self, held: Held) -> None:
        """Hand a sync attempt to a thread (attempt.attempt_in_thread); _from_thread
        takes its outcome on the loop. No asyncio task or future per run."""
        self.in_threads.add(held)
        timeout = held.row.timeout_seconds
        if timeout is not None:
            held.timer = self._loop.call_later(timeout, self.time_out, held)
        self.threads.post(self._attempt_in_thread, held, self._from_thread)

    def _attempt_in_thread(self, held: Held) -> Outcome | None:
        """In the thread."""
        rt = self.runtime
        task = self.tasks[held.row.task]
        tracing = rt.traced.tracing
        if tracing is not None:
            with tracing.attempt(held) as span:
                return span.ended(_attempt.attempt_in_thread(rt, held, task))
        return _attempt.attempt_in_thread(rt, held, task)

    def _from_thread(self, held: Held, outcome: Outcome | None, exc: BaseException | None) -> None:
        """On the loop: the thread's attempt returned."""
        self.in_threads.discard(held)
        self.check_quiet()
        if held.timer is not None:
            held.timer.cancel()
        if exc is not None:
            log.error("run %s: internal error in the worker", held.id, exc_info=exc)
            outcome = None
        if held.submitted:
            # timed out: its failure was written; the slot (and permit) was busy until now
            self.permits.release(held)
        elif outcome is None or held.lost or held.released:
            self.permits.release(held)
            self.transitions.finished(held, None, False)
        else:
            held.submitted = True
            self.completer.post(outcome, held)
        self.free(held)

    def owed_threads(self) -> int:
        """Thread attempts whose run is still ours: a lost attempt's run belongs to
        whoever rescued or canceled it, so a draining worker does not wait for its
        thread (which cannot be stopped, and may be stuck for as long as the outage
        that cost its lease)."""
        return sum(not h.lost for h in self.in_threads)

    def quiet_threads(self) -> asyncio.Future[None]:
        """On the loop, draining: a future done once no thread attempt owes its outcome
        (owed_threads)."""
        quiet = self.threads_quiet = self._loop.create_future()
        return quiet

    def check_quiet(self) -> None:
        quiet = self.threads_quiet
        if quiet is not None and not quiet.done() and not self.owed_threads():
            quiet.set_result(None)

    def time_out(self, held: Held) -> None:
        """On the loop: a thread's attempt ran past its task's timeout. Its failure is
        written now; the slot stays busy until the function returns (a thread cannot be
        stopped; ctx.cancelled tells it to)."""
        if held.submitted or held.lost or held.released:
            return
        held.submitted = True
        timeout = _attempt.AttemptTimeout(_attempt.timeout_message(held.row.timeout_seconds or 0.0))
        # as an async attempt's timeout: ctx.cancelled set, the failure per retry policy
        outcome = _attempt.raised(held, self.tasks[held.row.task], timeout)
        if outcome is None:
            return
        tracing = self.runtime.traced.tracing
        if tracing is not None:
            tracing.timed_out(held, outcome)
        if self.permits.limited(held.row.queue):
            # written once the thread's permit is filed: a limited queue's claims never
            # see a moment where neither the run nor its thread holds it
            self.permits.keep(held).add_done_callback(lambda _: self.completer.post(outcome, held))
        else:
            self.completer.post(outcome, held)

    # -- outcomes and lost leases ------------------------------------------------------

    def free(self, held: Held) -> None:
        if held in self.held:
            self.held.remove(held)
            self.freed()

    def leases(self) -> list[tuple[int, str]]:
        """On the loop: the leases of the attempts whose outcome is still to be written
        (what the lease keeper renews): those still running here, and those whose
        outcome the completer has not written yet."""
        leases = [(h.id, h.lease_token) for h in self.held if not h.submitted and not h.lost]
        if self.completer.unwritten:
            leases += self.completer.leases()
        return leases

    def running(self) -> list[str]:
        """On the loop: the lease tokens of the attempts whose code still runs here (or
        whose outcome is still to be handed over): the permits filed for any other
        attempt of this worker are stale (the lease keeper sweeps them)."""
        return [h.lease_token for h in self.held]

    def holds(self, held: Held) -> bool:
        """Whether this worker knows it still holds `held`'s run (any thread): not lost,
        canceled or released, and its leases renewed within the last third of the lease
        (the lease keeper renews every third)."""
        left = self.completer.lease_left
        return (
            not (held.lost or held.released)
            and left is not None
            and left() > self.lease_seconds / 3
        )

    def lose(self, run_id: int, why: str) -> None:
        """Stop a run we hold without writing its outcome: the lease is no longer ours."""
        held = next((h for h in self.held if h.id == run_id and not h.submitted), None)
        if held is None or held.lost:
            return
        log.warning("run %s (%s): stopping, %s", run_id, held.row.task, why)
        held.lost = True
        held.stop()
        self.stats["lost"] += 1
        self.check_quiet()
        if self.permits.limited(held.row.queue):
            # its code may run on (a thread cannot be stopped; a coroutine may ignore its
            # cancellation): the run no longer holds the permit, the attempt does, until
            # its code ends (pgqueue.cancel() filed it already when it canceled the run)
            self.permits.keep(held)

    def leases_lost(self, leases: list[tuple[int, str]]) -> None:
        """On the loop: the lease keeper's thread found these leases no longer valid."""
        lost = set(leases)
        for held in [h for h in self.held if (h.id, h.lease_token) in lost]:
            if not held.submitted and not held.lost:
                self.lose(held.id, "its lease was lost (expired, rescued or canceled)")


def _nothing() -> None:
    pass
