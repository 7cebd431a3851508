"""The executor: owns each attempt's whole life, from the claimed row the producer hands it
to the outcome the completer writes. Async attempts run in an asyncio task on the loop;
sync attempts of tasks without hooks run wholly in a worker thread (no asyncio task per
run); timeouts, hooks, lost leases, runs whose arguments cannot be decoded and the
permits of threads that outlive their attempt are all kept here. The attempt itself (call
the task, turn what happened into an Outcome) is attempt.py's."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pgqueue.worker import attempt as _attempt
from pgqueue.worker import connection
from pgqueue.worker._claimed import Claimed
from pgqueue.worker._completer import Completer, Outcome
from pgqueue.worker._permits import ZombiePermits
from pgqueue.worker._threads import DaemonThreads
from pgqueue.worker._transitions import Transitions
from pgqueue.worker.attempt import Held

if TYPE_CHECKING:
    from pgqueue.app import App

log = logging.getLogger("pgqueue.worker")


class Executor:
    """Runs the attempts this worker holds (`held`), at most `concurrency` threads for sync
    tasks. `freed()` is called whenever a slot frees (the producer's wake: it claims into
    it)."""

    def __init__(
        self,
        app: App,
        worker_id: UUID,
        concurrency: int,
        lease_seconds: float,
        stats: Counter[str],
        transitions: Transitions,
    ) -> None:
        self.app = app
        self.worker_id = worker_id
        self.app_label = ",".join(sorted(app.tasks)[:3]) + ("..." if len(app.tasks) > 3 else "")
        self.stats = stats
        self.transitions = transitions
        self.freed: Callable[[], None] = _nothing
        self.threads = DaemonThreads(concurrency)
        self.lease_seconds = lease_seconds
        self.permits = ZombiePermits(worker_id, lease_seconds)
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
        self.threads_quiet: asyncio.Future[None] | None = None
        # given by open(), on the loop, before the first claim
        self.completer: Completer = None  # type: ignore[assignment]
        self.stopping: asyncio.Event = None  # type: ignore[assignment]
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self, completer: Completer, stopping: asyncio.Event) -> None:
        """On the loop: where outcomes go, and the event set once the worker stops."""
        self.completer = completer
        self.stopping = stopping
        self._loop = asyncio.get_running_loop()

    # -- async attempts (and sync ones with a hook), in an asyncio task ----------------

    async def execute(self, held: Held) -> None:
        try:
            self.transitions.started(held)
            if self.app.tracing is None:
                outcome = await _attempt.attempt(self, held)
            else:
                outcome = await _attempt.traced_attempt(self, held, self.app.tracing)
            if outcome is None or held.lost:
                if not held.submitted:  # else it timed out, and timed_out() wrote it
                    self.transitions.finished(held, None, False)
            else:
                held.submitted = True
                inv = held.invocation
                if inv is None or inv.done():
                    # The slot is free while the outcome is written: the next claim
                    # overlaps this completion instead of waiting for it (a limited
                    # queue's permit comes back only when the outcome commits).
                    self.free(held)
                    if not self.hooked(held, outcome):
                        # Nothing left to do here once it is written: the completer
                        # settles it, and this task ends now (no second step per run).
                        self.completer.post(outcome, held)
                        return
                if inv is not None and not inv.done():
                    # timed out, its thread runs on: the permit stays taken (permits.keep)
                    await self.permits.keep(held)
                written = await self.completer.submit(outcome)
                self.written(held, outcome, written)
                if written:
                    await _attempt.run_hook(self, held, outcome)
            inv = held.invocation
            stopping = self.stopping is not None and self.stopping.is_set()
            if inv is not None and not inv.done() and not stopping:
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

    def timed_out(self, held: Held, outcome: Outcome) -> None:
        """An async attempt ran past its timeout (attempt._expire): its failure is
        written now and its hook follows; the slot stays busy until its coroutine ends,
        however long it ignores its cancellation."""
        if not self.hooked(held, outcome):
            self.completer.post(outcome, held)
            return
        task = asyncio.ensure_future(self._write_then_hook(held, outcome))
        self.executing.add(task)  # shutdown.drain() waits for it, as for any hook
        task.add_done_callback(self.executing.discard)

    async def _write_then_hook(self, held: Held, outcome: Outcome) -> None:
        written = await self.completer.submit(outcome)
        self.written(held, outcome, written)
        if written:
            await _attempt.run_hook(self, held, outcome)

    def hooked(self, held: Held, outcome: Outcome) -> bool:
        """A hook of the run's task follows this outcome's write."""
        task = self.app.tasks.get(held.row.task)
        if task is None or not task.has_hooks:
            return False  # most tasks: no hook at all, decided without a call
        return _attempt.hook_for(task, outcome) is not None

    # -- sync attempts, wholly in their thread -----------------------------------------

    def start_in_thread(self, held: Held) -> None:
        """Hand a sync attempt to a thread (attempt.attempt_in_thread); _from_thread
        takes its outcome on the loop. No asyncio task or future per run."""
        self.transitions.started(held)
        self.in_threads.add(held)
        timeout = held.row.timeout_seconds
        if timeout is not None:
            assert self._loop is not None
            held.timer = self._loop.call_later(timeout, self.time_out, held)
        self.threads.post(self._attempt_in_thread, held, self._from_thread)

    def _attempt_in_thread(self, held: Held) -> Outcome | None:
        """In the thread."""
        task = self.app.tasks[held.row.task]
        if self.app.tracing is not None:
            with self.app.tracing.attempt(held) as span:
                return span.ended(_attempt.attempt_in_thread(self, held, task))
        return _attempt.attempt_in_thread(self, held, task)

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
        outcome = _attempt.raised(held, self.app.tasks[held.row.task], timeout)
        if outcome is None:
            return
        if self.app.tracing is not None:
            self.app.tracing.timed_out(held, outcome)
        if self.permits.limited(held.row.queue):
            # written once the thread's permit is filed: a limited queue's claims never
            # see a moment where neither the run nor its thread holds it
            self.permits.keep(held).add_done_callback(lambda _: self.completer.post(outcome, held))
        else:
            self.completer.post(outcome, held)

    def refuse_undecodable(self, rows: list[Claimed]) -> list[Claimed]:
        """Fail, at once and for good, the claimed runs whose stored arguments could not
        be decoded (another attempt would fail the same way); the others run. Asked by
        the producer only when the claim's decoding made an Undecodable."""
        kept = []
        for row in rows:
            args: Any = row.args  # typed as the loader gives them when it can
            kwargs: Any = row.kwargs
            if type(args) is connection.Undecodable:
                what, bad = "args", args
            elif type(kwargs) is connection.Undecodable:
                what, bad = "kwargs", kwargs
            else:
                kept.append(row)
                continue
            held = Held(row.id, row.lease_token, row, self.app.make_context(row, self.worker_id))
            self.transitions.started(held)
            held.submitted = True
            message = f"the run's {what} cannot be decoded: {bad.why}; failed without a retry"
            log.error("run %s (%s): %s", row.id, row.task, message)
            outcome = _attempt.failure(
                held, "invalid_arguments", message, retry=None, with_traceback=False
            )
            self.completer.post(outcome, held)
        return kept

    # -- outcomes and lost leases ------------------------------------------------------

    def written(self, held: Held, outcome: Outcome, written: bool) -> None:
        """The attempt's outcome was written (or fenced out: the lease was lost)."""
        self.stats[outcome.state if written else "fenced"] += 1
        self.transitions.finished(held, outcome, written)

    def free(self, held: Held) -> None:
        if held in self.held:
            self.held.remove(held)
            self.freed()

    def leases(self) -> list[tuple[int, str]]:
        """On the loop: the leases of the attempts whose outcome is still to be written
        (what the lease keeper renews): those still running here, and those whose
        outcome the completer has not written yet."""
        leases = [(h.id, h.lease_token) for h in self.held if not h.submitted and not h.lost]
        if self.completer is not None and self.completer.unwritten:
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
