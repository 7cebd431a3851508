"""The worker: a composition of small duties around one claim loop.

claim loop   - claims runs in batches (SKIP LOCKED) whenever slots are free
executor     - runs each attempt (threads for sync tasks, the event loop for async ones)
completer    - writes outcomes in batches, fenced by lease
lease keeper - renews all held leases in one statement, from its own thread; drops runs
               whose lease was lost
watchdog     - warns when task code blocks the event loop, naming the task
rescuer      - takes back runs whose lease expired elsewhere
stager       - promotes scheduled runs that are due
listener     - LISTEN for new work and cancels
scheduler    - enqueues the due ticks of cron schedules
pruner       - deletes finished runs and events past their retention
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import json.scanner
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from psycopg import AsyncConnection
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from pgqueue import __version__, _sql, db, grants, migrate, schedules
from pgqueue.errors import PermissionDenied
from pgqueue.retention import DEFAULT_RETENTION, Retention
from pgqueue.runs import TERMINAL_STATES
from pgqueue.worker import _executor, semaphores
from pgqueue.worker._claimed import Claimed
from pgqueue.worker._completer import Completer, Outcome
from pgqueue.worker._executor import Held
from pgqueue.worker._gc import tuned_gc as tuned_gc  # public: pgqueue.worker.tuned_gc
from pgqueue.worker._pruner import Pruner
from pgqueue.worker._scheduler import Scheduler
from pgqueue.worker._service import DB_ERRORS, outage_delay
from pgqueue.worker._stager import Stager
from pgqueue.worker._threads import DaemonThreads
from pgqueue.worker._transitions import Transitions
from pgqueue.worker.leases import LeaseKeeper, LoopWatch, Rescuer, WorkerPruner
from pgqueue.worker.notifications import Listener

if TYPE_CHECKING:
    from pgqueue.app import App
    from pgqueue.metrics import WorkerMetrics

log = logging.getLogger("pgqueue.worker")

WORKFLOW_POOL_MAX = 16  # connections a worker's workflow steps may use at most
CLAIM_BATCH_MIN = 50  # a claim is split (see Worker.claim_batch) only above this size
CLAIMS_IN_FLIGHT = 2  # claims a worker has on their way at once, at most
LEFTOVER_WAIT = 1.0  # seconds a stopped worker waits for tasks it cancelled, at most


def _task_starter(
    loop: asyncio.AbstractEventLoop,
) -> Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]:
    """How Worker._claim starts an attempt's asyncio task. On Python 3.12+ the task starts
    eagerly: its first step runs at once, inside the task (asyncio.current_task() is the
    task itself, as it is for any task), and an attempt that finishes without suspending
    never goes through the loop's ready queue: about 2 us of worker CPU less per run
    (bench/RESULTS.md). On 3.11 there is no correct way to do that (a task
    cannot be created without being scheduled), so it is the loop's own create_task
    (asyncio.create_task would look the loop up and name the task, per run)."""
    if sys.version_info >= (3, 12):
        return functools.partial(asyncio.Task, loop=loop, eager_start=True)
    return loop.create_task


class Worker:
    """Runs tasks of `app` from `queues` (default: every queue the app declares or uses).

    concurrency     runs at once in this process
    lease_seconds   how long a claim stays valid without renewal (renewed every third)
    poll_interval   safety-net poll when no NOTIFY arrives (seconds)
    grace           at shutdown, how long running tasks may finish before release
    retention       how long finished runs and events are kept (None: never prune)
    metrics_port    serve Prometheus metrics on this port (needs pgqueue[metrics])
    max_runs        drain and stop once this many runs were claimed (exactly that many)
    max_memory_mb   drain and stop once the process's RSS exceeds this many MiB
    """

    def __init__(
        self,
        app: App,
        *,
        queues: list[str] | None = None,
        concurrency: int = 10,
        lease_seconds: float = 30.0,
        poll_interval: float = 5.0,
        grace: float = 30.0,
        stage_interval: float = 1.0,
        rescue_interval: float | None = None,
        install_signal_handlers: bool = True,
        retention: Retention | None = DEFAULT_RETENTION,
        metrics_port: int | None = None,
        max_runs: int | None = None,
        max_memory_mb: float | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if lease_seconds < 1:
            raise ValueError("lease_seconds must be >= 1")
        if max_runs is not None and max_runs < 1:
            raise ValueError("max_runs must be >= 1 (or None: no limit)")
        if max_memory_mb is not None and not max_memory_mb > 0:
            raise ValueError("max_memory_mb must be > 0 (or None: no limit)")
        self.app = app
        self.queues = list(queues) if queues else app.served_queues()
        self.concurrency = concurrency
        # Runs per claim at most. A large worker claims half its slots at a time, so that
        # the next claim is in flight while the runs of the last one start: the claim's
        # round trip and the worker's Python overlap instead of alternating. A small one
        # claims all its free slots at once: a claim of 5 costs nearly what a claim of 50
        # does, so halving it loses more than the overlap gains. Measured in
        # bench/RESULTS.md ("Decisions the measurements settled").
        self.claim_batch = max(min(concurrency, CLAIM_BATCH_MIN), -(-concurrency // 2))
        self.lease_seconds = float(lease_seconds)
        self.poll_interval = poll_interval
        self.grace = grace
        self.stage_interval = stage_interval
        self.rescue_interval = rescue_interval or min(5.0, self.lease_seconds / 2)
        self.install_signal_handlers = install_signal_handlers
        self.retention = retention
        self.metrics_port = metrics_port
        self.max_runs = max_runs
        self.max_memory_mb = max_memory_mb
        self._rss_checked = -1.0  # when _over_memory last read the RSS (monotonic)
        self.transitions = Transitions(None)
        self.id = uuid.uuid4()
        self.app_label = ",".join(sorted(app.tasks)[:3]) + ("..." if len(app.tasks) > 3 else "")
        # Attempts this process holds (a run retried onto this worker while an abandoned
        # thread of its previous attempt still runs is in it twice, as two attempts).
        self.held: set[Held] = set()
        self.limited: set[str] = set()  # served queues with cluster-wide limits
        self._reserved = 0  # slots asked for by the claims in flight
        self.marks = semaphores.ClaimMarks()
        # Every attempt's coroutine until its outcome is handed to the completer, or
        # written if something follows the write (a hook, a thread still running).
        self._executing: set[asyncio.Task[None]] = set()
        # Attempts running wholly in a thread (no asyncio task: see _start_in_thread), and
        # what _drain() waits on until there are none.
        self._in_threads = 0
        self._threaded: dict[str, bool] = {}  # task name: its attempts run in a thread
        self._threads_quiet: asyncio.Future[None] | None = None
        # Attempts whose outcome is written (or whose lease is gone) while their thread
        # still runs, in a limited queue: the task filing their permit in
        # pgqueue.zombie_permits, until the thread returns (_keep_permit).
        self._zombies: dict[Held, asyncio.Task[None]] = {}
        self._permit_tasks: set[asyncio.Task[None]] = set()
        self.stats: Counter[str] = Counter()
        # enqueue-to-claim latency of the latest runs (bounded: a worker lives long)
        self.pickup_seconds: deque[float] = deque(maxlen=10_000)
        self.threads = DaemonThreads(concurrency)
        if any(t.workflow for t in app.tasks.values()) and app._pool is None:
            # Workflow steps write through the App's pool from their threads: with the
            # default 4 connections, 50 concurrent workflows would queue for them.
            app.pool_size = max(app.pool_size, min(concurrency, WORKFLOW_POOL_MAX))
        self._loop: asyncio.AbstractEventLoop | None = None
        # how _claim starts an attempt's task, on this loop (_task_starter; set with it)
        self._start_task: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]] | None = None
        self._wake: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._signals = 0
        self._pool: AsyncConnectionPool[Any] | None = None
        self.started = threading.Event()

    # -- public control -------------------------------------------------------------

    def run(self, burst: bool = False) -> None:
        """Block, running tasks until stop() or a signal (or, with burst, until the served
        queues hold nothing due)."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.run_async(burst=burst))
        finally:
            try:
                _close_loop(loop)
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def stop(self) -> None:
        """Ask the worker to drain and stop; safe from any thread or a signal handler."""
        loop = self._loop
        if loop is not None and self._stop is not None:
            loop.call_soon_threadsafe(self._stop.set)

    # -- used by the duties ---------------------------------------------------------

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        assert self._pool is not None
        return self._pool

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def lose(self, run_id: int, why: str) -> None:
        """Stop a run we hold without writing its outcome: the lease is no longer ours."""
        held = next((h for h in self.held if h.id == run_id and not h.submitted), None)
        if held is None or held.lost:
            return
        log.warning("run %s (%s): stopping, %s", run_id, held.row.task, why)
        held.lost = True
        held.stop()
        self.stats["lost"] += 1
        inv = held.invocation
        if self._threaded.get(held.row.task) or (inv is not None and not inv.done()):
            # its thread runs on: the run no longer holds the permit, the thread does
            self._keep_permit(held)

    def leases_lost(self, leases: list[tuple[int, str]]) -> None:
        """On the loop: the lease keeper's thread found these leases no longer valid."""
        lost = set(leases)
        for held in [h for h in self.held if (h.id, h.lease_token) in lost]:
            if not held.submitted and not held.lost:
                self.lose(held.id, "its lease was lost (expired, rescued or canceled)")

    # -- main -------------------------------------------------------------------------

    async def run_async(self, burst: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._start_task = _task_starter(self._loop)
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        metrics = self._serve_metrics()
        dsn = self.app.dsn
        # Before registering: a worker that shows up in pgqueue.workers must already drain
        # on SIGTERM (not die of it, leaving its row behind).
        self._install_signals()
        # A role without the worker's grants stops here, in one line (PermissionDenied),
        # rather than in a duty's retry loop.
        with db.connect(dsn) as conn, db.translate_errors(conn):
            migrate.check(conn)
            self._check_privileges(conn)
            self._register(conn)
            schedules.sync(conn, self.app, self.queues)
        self._pool = AsyncConnectionPool(
            dsn,
            min_size=2,
            max_size=4,
            kwargs={"autocommit": True},
            timeout=5,
            reconnect_timeout=db.RECONNECT_TIMEOUT,
            open=False,
            name=f"pgqueue-worker-{self.id.hex[:8]}",
            configure=functools.partial(_configure_connection, generic_plans=self.app.notify),
        )
        await self._pool.open(wait=False)
        self.completer = Completer(self)
        self.stager = Stager(self)
        self.listener = Listener(self)
        self.queue_limits = semaphores.QueueLimits(self)
        await self.queue_limits.refresh()
        duties = [
            self.queue_limits.run(),
            self.completer.run(),
            Rescuer(self).run(),
            WorkerPruner(self).run(),
            self.stager.run(),
            Scheduler(self).run(),
        ]
        if self.retention is not None:
            duties.append(Pruner(self, self.retention).run())
        if metrics is not None:
            duties.append(self._collect_metrics(metrics))
        if self.app.notify:
            duties.append(self.listener.run())
        background = [asyncio.create_task(d) for d in duties]
        self.lease_keeper = LeaseKeeper(self)
        self.lease_keeper.start()
        watch = LoopWatch(self)
        watch.start()
        log.info(
            "worker %s started: queues=%s concurrency=%d lease=%.0fs",
            self.id,
            ",".join(self.queues),
            self.concurrency,
            self.lease_seconds,
        )
        try:
            if self.app.notify and not burst:
                # Do not report ready before LISTEN is in place: a run enqueued right
                # after would otherwise wait for the next poll.
                await asyncio.wait_for(self.listener.connected.wait(), 10)
            self.started.set()
            await self._claim_loop(burst)
            await self._drain()
        finally:
            for t in background:
                t.cancel()
            # On Python 3.11, asyncio.wait_for (inside the pool's getconn) swallows a cancel
            # that lands just as a connection is handed over, and that duty would then run
            # on forever: cancel again until every duty has ended.
            pending = set(background)
            while pending:
                _, pending = await asyncio.wait(pending, timeout=1)
                for t in pending:
                    t.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            watch.stop()
            # in a thread: a renewal in flight is waited for, and the loop is not blocked
            await asyncio.to_thread(self.lease_keeper.stop)
            await self._deregister()
            await self._pool.close()
            self.threads.shutdown()
            self._remove_signals()
            log.info("worker %s stopped: %s", self.id, dict(self.stats))

    def _check_privileges(self, conn: Any) -> None:
        """Refuse to start without every privilege a worker uses: a missing one would
        otherwise surface later, in one duty's retry loop (one catalog query, at start)."""
        lacking = grants.missing(conn, "worker")
        if lacking:
            role = conn.info.user
            more = f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""
            raise PermissionDenied(
                f"role {role} lacks the worker's grants ({'; '.join(lacking[:3])}{more}): "
                f"the owner of schema pgqueue can run `pgqueue grants {role} --as worker "
                "--apply` (see docs/security.md)"
            )

    def _register(self, conn: Any) -> None:
        for q in self.app.queues.values():
            conn.execute(
                _sql.query("configure_queue"),
                {
                    "queue": q.name,
                    "concurrency": q.concurrency,
                    "group_concurrency": q.group_concurrency,
                },
            )
        conn.execute(
            _sql.query("register_worker"),
            {
                "id": self.id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "queues": self.queues,
                "tasks": sorted(self.app.tasks),
                "concurrency": self.concurrency,
                "version": __version__,
            },
        )

    async def _deregister(self) -> None:
        try:
            async with self.pool.connection(timeout=2) as conn:
                await conn.execute(_sql.query("deregister_worker"), {"id": self.id})
        except DB_ERRORS:
            log.warning(
                "could not remove worker %s from pgqueue.workers; it will be pruned", self.id
            )

    async def _claim_loop(self, burst: bool) -> None:
        assert self._wake is not None and self._stop is not None
        failures = 0
        start = 0
        settled = False
        full = True  # the last claim got all it asked for: its queue may hold more
        # Claims in flight. A second one starts while the first is on its way only for a
        # whole batch of free slots (not one claim per freed slot), and only while the
        # queues have more: the server works on one claim while this process starts the
        # runs of the other. In burst mode, one at a time (see the end condition below).
        depth = 1 if burst else CLAIMS_IN_FLIGHT
        flying: set[asyncio.Task[tuple[int, bool]]] = set()
        try:
            while not self._stop.is_set():
                self._wake.clear()
                free = self.concurrency - len(self.held) - self._reserved
                if free > 0 and (
                    not flying or (len(flying) < depth and full and free >= self.claim_batch)
                ):
                    if self.max_memory_mb is not None and self._over_memory():
                        continue  # draining: the loop ends
                    flying.add(asyncio.create_task(self._claim_round(start)))
                    start = (start + 1) % len(self.queues)
                    continue
                if not flying:  # every slot is taken
                    await self._sleep(self.poll_interval, wake=True)
                    continue
                done, flying = await asyncio.wait(flying, return_when=asyncio.FIRST_COMPLETED)
                claimed, full, error = 0, False, None
                for claim in done:
                    try:
                        got, more = claim.result()
                    except Exception as exc:
                        error = exc
                    else:
                        claimed += got
                        full = full or more
                if error is not None:
                    failures += 1
                    full = True
                    if isinstance(error, DB_ERRORS):
                        delay = outage_delay("claim", error, failures)
                    else:
                        # A bug or an unexpected database error must not kill the worker
                        # and its running tasks: log it and try again later.
                        delay = min(30.0, 0.5 * 2**failures)
                        log.error("claim failed; retrying in %.1fs", delay, exc_info=error)
                    await self._sleep(delay)
                    continue
                failures = 0
                if flying:
                    continue  # decide when the other claim lands
                # Burst ends only when nothing is held and no outcome is still being
                # written (a limited queue refuses claims for permits about to come back),
                # and after one more empty claim that started once all of that was
                # settled: an earlier claim's snapshot may predate our last completion.
                if (
                    burst
                    and not claimed
                    and not self.held
                    and not self._executing
                    and not self.completer.unwritten
                ):
                    try:
                        staged, _ = await self.stager.stage()
                    except DB_ERRORS:
                        staged = 1
                    if not staged and settled:
                        return
                    settled = not staged
                    full = True
                    continue
                settled = False
                if full and len(self.held) < self.concurrency:
                    continue  # the queue may hold more
                full = True
                await self._sleep(self.poll_interval, wake=True)
        finally:
            if flying:  # their runs are held now: _drain() sees them
                await asyncio.wait(flying)

    async def _claim_round(self, start: int) -> tuple[int, bool]:
        """Claim into the free slots, queue after queue from `start`: (runs claimed, some
        claim got all it asked for)."""
        claimed, more = 0, False
        n = len(self.queues)
        for i in range(n):
            free = self.concurrency - len(self.held) - self._reserved
            if self.max_runs is not None:
                # exactly max_runs: the claims in flight count as what they asked for
                free = min(free, self.max_runs - self.stats["claimed"] - self._reserved)
            if free <= 0:
                break
            asked = min(free, self.claim_batch)
            self._reserved += asked
            try:
                got = await self._claim(self.queues[(start + i) % n], asked)
            finally:
                self._reserved -= asked
            claimed += got
            more = more or got == asked
        return claimed, more

    async def _sleep(self, seconds: float, wake: bool = False) -> None:
        assert self._wake is not None and self._stop is not None
        waits = [asyncio.ensure_future(self._stop.wait())]
        if wake:
            waits.append(asyncio.ensure_future(self._wake.wait()))
        _, _pending = await asyncio.wait(
            waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
        )
        for p in waits:
            p.cancel()

    async def _claim(self, queue: str, limit: int) -> int:
        params = {
            "queue": queue,
            "limit": limit,
            "worker_id": self.id,
            "lease_seconds": self.lease_seconds,
            # Runs whose outcome is still being written keep their permits until it
            # commits: the limit holds for valid leases as the database shows them.
            "finishing": [],
        }
        limited = queue in self.limited
        if not limited:
            params |= self.marks.start(queue)
        undecodable = Undecodable.made
        async with self.pool.connection() as conn:
            rows = await semaphores.claim(conn, queue, params, limited)
        if not limited:
            self.marks.landed(queue, rows)
        if rows:
            self.lease_keeper.add(rows)
        claimed = len(rows)
        self.stats["claimed"] += claimed
        if Undecodable.made != undecodable:  # not per run: only when a document failed
            rows = self._refuse_undecodable(rows)
        rows.sort(key=lambda r: (r.priority, r.id))
        start = self._start_task
        assert start is not None  # set by run_async, before any claim
        threaded = self._threaded
        for row in rows:
            held = Held(row.id, row.lease_token, row, self.app.make_context(row))
            self.held.add(held)
            self.pickup_seconds.append(max(0.0, row.pickup_seconds))
            in_thread = threaded.get(row.task)
            if in_thread is None:  # once per task name (a dict lookup per run after that)
                in_thread = threaded[row.task] = _executor.in_thread(self.app.tasks.get(row.task))
            if in_thread:
                self._start_in_thread(held)
                continue
            task = start(self._execute(held))
            if not task.done():  # an eager start (_task_starter) may have finished it
                held.task = task
                self._executing.add(task)
        if self.max_runs is not None and self.stats["claimed"] >= self.max_runs:
            self._recycle(f"{self.max_runs} runs claimed (max_runs)")
        return claimed

    def _refuse_undecodable(self, rows: list[Claimed]) -> list[Claimed]:
        """Fail, at once and for good, the claimed runs whose stored arguments could not
        be decoded (another attempt would fail the same way); the others run."""
        kept = []
        for row in rows:
            args: Any = row.args  # typed as the loader gives them when it can
            kwargs: Any = row.kwargs
            if type(args) is Undecodable:
                what, bad = "args", args
            elif type(kwargs) is Undecodable:
                what, bad = "kwargs", kwargs
            else:
                kept.append(row)
                continue
            held = Held(row.id, row.lease_token, row, self.app.make_context(row))
            self.transitions.started(held)
            held.submitted = True
            message = f"the run's {what} cannot be decoded: {bad.why}; failed without a retry"
            log.error("run %s (%s): %s", row.id, row.task, message)
            outcome = _executor.failure(
                held, "invalid_arguments", message, retry=None, with_traceback=False
            )
            self.completer.post(outcome, held)
        return kept

    async def _execute(self, held: Held) -> None:
        try:
            self.transitions.started(held)
            outcome = await _executor.attempt(self, held)
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
                    self._free(held)
                    if not self._hooked(held, outcome):
                        # Nothing left to do here once it is written: the completer
                        # settles it, and this task ends now (no second step per run).
                        self.completer.post(outcome, held)
                        return
                if inv is not None and not inv.done():
                    # timed out, its thread runs on: the permit stays taken (_keep_permit)
                    await self._keep_permit(held)
                written = await self.completer.submit(outcome)
                self.written(held, outcome, written)
                if written and outcome.state in TERMINAL_STATES:
                    await _executor.run_hook(self, held, outcome)
            inv = held.invocation
            stopping = self._stop is not None and self._stop.is_set()
            if inv is not None and not inv.done() and not stopping:
                # A timed-out sync task still runs in its thread: the run has moved on,
                # but this slot stays busy until the function returns. Not when stopping:
                # a released run must not keep the process (and its thread) alive.
                await asyncio.wait([inv])
            if inv is not None and inv.done() and self._zombies:
                # (not while it runs on at exit: the permit goes with the worker's row)
                self._release_permit(held)
        except Exception:
            log.exception("run %s: internal error in the worker", held.id)
        finally:
            self._free(held)
            if held.task is not None:  # this task (set once its first step suspended)
                self._executing.discard(held.task)

    # -- sync attempts, wholly in their thread -----------------------------------------

    def _start_in_thread(self, held: Held) -> None:
        """Hand a sync attempt to a thread (_executor.attempt_in_thread); _from_thread
        takes its outcome on the loop. No asyncio task or future per run."""
        self.transitions.started(held)
        self._in_threads += 1
        timeout = held.row.timeout_seconds
        if timeout is not None:
            assert self._loop is not None
            held.timer = self._loop.call_later(timeout, self._time_out, held)
        self.threads.post(self._attempt_in_thread, held, self._from_thread)

    def _attempt_in_thread(self, held: Held) -> Outcome | None:
        """In the thread."""
        return _executor.attempt_in_thread(self, held, self.app.tasks[held.row.task])

    def _from_thread(self, held: Held, outcome: Outcome | None, exc: BaseException | None) -> None:
        """On the loop: the thread's attempt returned."""
        self._in_threads -= 1
        quiet = self._threads_quiet
        if not self._in_threads and quiet is not None and not quiet.done():
            quiet.set_result(None)
        if held.timer is not None:
            held.timer.cancel()
        if exc is not None:
            log.error("run %s: internal error in the worker", held.id, exc_info=exc)
            outcome = None
        if held.submitted:
            # timed out: its failure was written; the slot (and permit) was busy until now
            self._release_permit(held)
        elif outcome is None or held.lost or held.released:
            self._release_permit(held)
            self.transitions.finished(held, None, False)
        else:
            held.submitted = True
            self.completer.post(outcome, held)
        self._free(held)

    def _time_out(self, held: Held) -> None:
        """On the loop: a thread's attempt ran past its task's timeout. Its failure is
        written now; the slot stays busy until the function returns (a thread cannot be
        stopped; ctx.cancelled tells it to)."""
        if held.submitted or held.lost or held.released:
            return
        held.submitted = True
        timeout = _executor.AttemptTimeout(
            _executor.timeout_message(held.row.timeout_seconds or 0.0)
        )
        # as an async attempt's timeout: ctx.cancelled set, the failure per retry policy
        outcome = _executor.raised(held, self.app.tasks[held.row.task], timeout)
        if outcome is None:
            return
        if held.row.queue in self.limited:
            # written once the thread's permit is filed: a limited queue's claims never
            # see a moment where neither the run nor its thread holds it
            self._keep_permit(held).add_done_callback(lambda _: self.completer.post(outcome, held))
        else:
            self.completer.post(outcome, held)

    # -- permits of threads that outlive their attempt --------------------------------

    def _keep_permit(self, held: Held) -> asyncio.Task[None]:
        """File `held` in pgqueue.zombie_permits (a limited queue's only), for as long as
        its thread runs: the task that does it, done once it is filed (or given up)."""
        task = self._zombies.get(held)
        if task is None:
            task = self._zombies[held] = asyncio.ensure_future(self._hold_permit(held))
        return task

    async def _hold_permit(self, held: Held) -> None:
        row = held.row
        if row.queue not in self.limited:
            return
        params = {
            "lease_token": held.lease_token,
            "run_id": held.id,
            "worker_id": self.id,
            "queue": row.queue,
            "group_key": row.group_key,
            "lease_seconds": self.lease_seconds,
        }
        for failures in range(1, 4):
            try:
                async with self.pool.connection() as conn:
                    await conn.execute(_sql.query("hold_zombie_permit"), params)
                return
            except DB_ERRORS as exc:
                await asyncio.sleep(outage_delay("keeping a permit", exc, failures))
            except Exception:
                break
        log.error(
            "run %s (%s): could not keep its permit while its thread runs on; the queue's "
            "limit may be exceeded until it returns",
            held.id,
            row.task,
        )

    def _release_permit(self, held: Held) -> None:
        """On the loop: `held`'s thread returned; its permit, if filed, is free."""
        hold = self._zombies.pop(held, None)
        if hold is not None:
            release = asyncio.ensure_future(self._drop_permit(held, hold))
            self._permit_tasks.add(release)
            release.add_done_callback(self._permit_tasks.discard)

    async def _drop_permit(self, held: Held, hold: asyncio.Task[None]) -> None:
        await hold  # filed first, or a late insert would outlive the thread
        failures = 0
        while True:
            try:
                async with self.pool.connection() as conn:
                    await conn.execute(
                        _sql.query("release_zombie_permit"), {"lease_token": held.lease_token}
                    )
                return
            except DB_ERRORS as exc:
                # the worker's row goes at exit, and its permits with it
                failures += 1
                await asyncio.sleep(outage_delay("returning a permit", exc, failures))

    # -- recycling --------------------------------------------------------------------

    def _over_memory(self) -> bool:
        """Whether RSS exceeds max_memory_mb (then drain), asked before each claim: the
        moment it matters, since a draining worker only stops claiming. Read at most ten
        times a second (a read of /proc is some microseconds)."""
        now = time.monotonic()
        if now - self._rss_checked < 0.1:
            return False
        self._rss_checked = now
        rss, limit = rss_mb(), self.max_memory_mb
        assert limit is not None
        if rss <= limit:
            return False
        self._recycle(f"RSS {rss:.0f} MiB over max_memory_mb {limit:g}")
        return True

    def _recycle(self, why: str) -> None:
        """Drain and stop, as on SIGTERM: a supervisor starts a fresh process."""
        assert self._stop is not None
        if not self._stop.is_set():
            log.info("%s: draining to exit (recycling)", why)
            self._stop.set()

    def timed_out(self, held: Held, outcome: Outcome) -> None:
        """An async attempt ran past its timeout (_executor._expire): its failure is
        written now and its hook follows; the slot stays busy until its coroutine ends,
        however long it ignores its cancellation."""
        if not self._hooked(held, outcome):
            self.completer.post(outcome, held)
            return
        task = asyncio.ensure_future(self._write_then_hook(held, outcome))
        self._executing.add(task)  # _drain() waits for it, as for any hook
        task.add_done_callback(self._executing.discard)

    async def _write_then_hook(self, held: Held, outcome: Outcome) -> None:
        written = await self.completer.submit(outcome)
        self.written(held, outcome, written)
        if written and outcome.state in TERMINAL_STATES:
            await _executor.run_hook(self, held, outcome)

    def _hooked(self, held: Held, outcome: Outcome) -> bool:
        """A hook of the run's task may follow this outcome's write."""
        if outcome.state not in TERMINAL_STATES:
            return False
        task = self.app.tasks.get(held.row.task)
        return task is not None and (task.on_success is not None or task.on_failure is not None)

    def written(self, held: Held, outcome: Outcome, written: bool) -> None:
        """The attempt's outcome was written (or fenced out: the lease was lost)."""
        self.stats[outcome.state if written else "fenced"] += 1
        self.transitions.finished(held, outcome, written)

    def _free(self, held: Held) -> None:
        if held in self.held:
            self.held.remove(held)
            self.wake()

    def _serve_metrics(self) -> WorkerMetrics | None:
        if self.metrics_port is None:
            return None
        from pgqueue.metrics import WorkerMetrics

        metrics = WorkerMetrics()
        metrics.serve(self.metrics_port)
        self.transitions.metrics = metrics
        return metrics

    async def _collect_metrics(self, metrics: WorkerMetrics) -> None:
        """Keep the queue depth gauges fresh; stop serving when the worker stops."""
        from pgqueue.worker._metrics import QueueDepth

        try:
            await QueueDepth(self, metrics).run()
        finally:
            metrics.close()

    async def _drain(self) -> None:
        """Stop claiming; let running tasks finish within the grace period; release the
        rest (back to queued, the attempt given back)."""
        waits: list[asyncio.Future[Any]] = [h.task for h in self.held if h.task is not None]
        if self._in_threads:
            self._threads_quiet = asyncio.get_running_loop().create_future()
            waits.append(self._threads_quiet)
        if waits:
            running = sum(not h.submitted for h in self.held)
            log.info("draining %d running runs (grace %.0fs)", running, self.grace)
            await asyncio.wait(waits, timeout=self.grace)
        leftover = [h for h in self.held if not h.submitted and not h.lost]
        if leftover:
            log.warning("grace period over: releasing %d runs", len(leftover))
            for h in leftover:
                h.released = True
                h.stop()
            releases = [Outcome(h.id, h.lease_token, "queued", refund=True) for h in leftover]
            written = await asyncio.wait_for(
                asyncio.gather(*(self.completer.submit(o) for o in releases)), 10
            )
            self.stats["released"] += sum(written)
        # Outcomes still being written, hooks still running; not the released attempts,
        # whose threads are abandoned (their runs are back in the queue).
        abandoned = {h.task for h in self.held if h.released or h.lost}
        writing = [t for t in self._executing if t not in abandoned]
        if writing:
            await asyncio.wait(writing, timeout=5)
        try:  # outcomes whose attempt's task ended at hand-in (Completer.post)
            await asyncio.wait_for(self.completer.settled(), 5)
        except TimeoutError:
            log.warning("%d outcomes not written at exit", self.completer.unwritten)

    # -- signals ----------------------------------------------------------------------

    def _handles_signals(self) -> bool:
        return (
            self.install_signal_handlers and threading.current_thread() is threading.main_thread()
        )

    def _install_signals(self) -> None:
        if self._handles_signals():
            assert self._loop is not None
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self._on_signal, sig)

    def _remove_signals(self) -> None:
        if self._handles_signals():
            assert self._loop is not None
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning(
                "second %s: exiting now; held runs are rescued when their leases expire", sig.name
            )
            os._exit(1)
        log.info(
            "%s: finishing running tasks (grace %.0fs); send it again to exit now",
            sig.name,
            self.grace,
        )
        assert self._stop is not None
        self._stop.set()


def rss_mb() -> float:
    """This process's resident set size in MiB: /proc/self/statm (one read) where there is
    one, else the peak RSS from getrusage."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio.run's ending, except that task code which swallows its cancellation
    cannot keep a stopped worker's process alive: such a task (its run was released or
    failed already) is left behind after LEFTOVER_WAIT seconds."""
    pending = asyncio.all_tasks(loop)
    for t in pending:
        t.cancel()
    if pending:
        _, left = loop.run_until_complete(asyncio.wait(pending, timeout=LEFTOVER_WAIT))
        if left:
            log.warning("left behind %d tasks that ignore their cancellation", len(left))
    loop.run_until_complete(loop.shutdown_asyncgens())
    with contextlib.suppress(TimeoutError):  # a to_thread() call of task code still running
        loop.run_until_complete(asyncio.wait_for(loop.shutdown_default_executor(), LEFTOVER_WAIT))


_decoder = json.JSONDecoder()
_decode_json = _decoder.decode
_scan_json = json.scanner.make_scanner(cast(Any, _decoder))  # what decode() calls


class Undecodable:
    """What _loads_json gives for a document it cannot decode (too deep for Python's
    decoder, not JSON), instead of raising: psycopg decodes a claim's rows all at once,
    after the claim committed, and one bad document must not orphan the whole batch.
    Worker._claim fails the runs that hold one (Worker._refuse_undecodable)."""

    __slots__ = ("why",)
    made = 0  # ever made, in this process: a claim looks for them only when this moved

    def __init__(self, why: str) -> None:
        self.why = why
        Undecodable.made += 1


def _loads_json(data: str | bytes) -> Any:
    """json.loads for the worker's connections, with the common empty kwargs and args
    made without a parse (a claim loads two documents per run). Other documents go
    straight to the decoder's scanner, as jsonb's text has no whitespace around the
    value (0.3 us against 0.7 for JSONDecoder.decode per document); anything
    else takes the full decode, for its error message. Never raises: see Undecodable."""
    if data == b"{}":
        return {}
    if data == b"[]":
        return []
    try:
        text = data if isinstance(data, str) else data.decode()
        try:
            value, end = _scan_json(text, 0)
        except StopIteration:
            end = -1
        if end != len(text):
            return _decode_json(text)
    except RecursionError as exc:
        return Undecodable(f"nested deeper than Python's JSON decoder can go ({exc})")
    except ValueError as exc:
        return Undecodable(f"not JSON ({exc})")
    return value


async def _configure_connection(conn: AsyncConnection[Any], *, generic_plans: bool) -> None:
    set_json_loads(_loads_json, conn)
    if not generic_plans:
        return
    # The worker's statements are prepared (psycopg prepares a statement on its fifth
    # run) and written for generic plans: tests/test_explain.py checks each under this
    # setting. Left to choose, the server re-plans the claim on every call (a LIMIT
    # parameter makes the generic plan look 100x dearer than a custom one): about a
    # tenth of the server's time per run, measured in bench/RESULTS.md. A session
    # setting: not with notifications off, the setting for transaction-mode poolers,
    # where it would land on a server connection that other clients share.
    await conn.execute("SET plan_cache_mode = force_generic_plan")
