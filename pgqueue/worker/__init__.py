"""The worker: parts wired around one event loop; each part is given only what it uses.

producer     - claims runs in batches (SKIP LOCKED) whenever slots are free (producer.py)
executor     - owns each attempt's life: threads for sync tasks, the event loop for async
               ones, timeouts, hooks, lost leases (executor.py, attempt.py)
processes    - with processes=N, sync tasks' code in child processes, JSON on pipes,
               killed past their stop and recycled (processes.py)
completer    - writes outcomes in batches, fenced by lease (_completer.py)
listener     - LISTEN for new work, cancels, queue config and due times, read with
               bounded memory and loop time whatever arrives (notifications.py)
shutdown     - signals, draining, closing the loop (shutdown.py)
maintenance/ - one module per periodic duty: the lease keeper (its own thread), the loop
               watchdog, the rescuer, the stager, the scheduler, the pruners, the queue
               limits and the queue depth gauges
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from psycopg_pool import AsyncConnectionPool

from pgqueue import _logging
from pgqueue._version import __version__
from pgqueue.db import connect as db
from pgqueue.ops.retention import DEFAULT_RETENTION, Retention
from pgqueue.schedules import schedule as schedules
from pgqueue.worker import attempt as _attempt
from pgqueue.worker import connection, registration, shutdown
from pgqueue.worker._completer import Completer
from pgqueue.worker._gc import tuned_gc as tuned_gc  # public: pgqueue.worker.tuned_gc
from pgqueue.worker._permits import ZombiePermits
from pgqueue.worker._service import Outage, quiet_pool_retries, use_outage
from pgqueue.worker._threads import DaemonThreads
from pgqueue.worker._transitions import Transitions
from pgqueue.worker.attempt import Runtime
from pgqueue.worker.defaults import ASYNC_CONCURRENCY as ASYNC_CONCURRENCY
from pgqueue.worker.defaults import SYNC_CONCURRENCY as SYNC_CONCURRENCY
from pgqueue.worker.defaults import default_concurrency
from pgqueue.worker.executor import Executor
from pgqueue.worker.maintenance import queue_depth
from pgqueue.worker.maintenance.aging import PriorityAging
from pgqueue.worker.maintenance.lease_keeper import LeaseClock, LeaseKeeper
from pgqueue.worker.maintenance.loop_watch import LoopWatch
from pgqueue.worker.maintenance.pruner import Pruner
from pgqueue.worker.maintenance.queue_limits import QueueLimits
from pgqueue.worker.maintenance.rescuer import Rescuer
from pgqueue.worker.maintenance.scheduler import Scheduler
from pgqueue.worker.maintenance.stager import Stager
from pgqueue.worker.maintenance.tally import TallyKeeper
from pgqueue.worker.maintenance.worker_pruner import WorkerPruner
from pgqueue.worker.notifications import Listener
from pgqueue.worker.probes import Probes
from pgqueue.worker.processes import Processes, find_app_path
from pgqueue.worker.producer import Producer
from pgqueue.workflows.durable import Durable

if TYPE_CHECKING:
    from pgqueue.app import App
    from pgqueue.ops.metrics import WorkerMetrics

log = logging.getLogger("pgqueue.worker")

WORKFLOW_POOL_MAX = 16  # connections a worker's workflow steps may use at most


def executor_for(
    app: App,
    worker_id: uuid.UUID,
    threads: DaemonThreads,
    lease_seconds: float,
    stats: Counter[str],
    transitions: Transitions,
    freed: Callable[[], None],
    completer: Completer,
    permits: ZombiePermits,
    stopping: asyncio.Event,
    processes: Processes | None = None,
) -> Executor:
    """The executor of a worker of `app` (on the running loop), given the narrow values it
    uses of the app: its tasks, result limits, sync wrappers, where its tracing is (read
    at each attempt, as before), how it makes an attempt's Context and a workflow's
    Durable; its sync code runs in `threads` (or, for sync tasks, in `processes`)."""
    names = sorted(app.tasks)
    runtime = Runtime(
        tasks=app.tasks,
        tasks_label=",".join(names[:3]) + ("..." if len(names) > 3 else ""),
        max_payload_bytes=app.max_payload_bytes,
        max_json_depth=app.max_json_depth,
        threads=threads,
        sync_wrappers=app.sync_wrappers,
        wrap_sync=app.wrap_sync,
        traced=app,
        processes=processes,
    )
    return Executor(
        runtime,
        worker_id,
        lease_seconds,
        stats,
        transitions,
        app.make_context,
        functools.partial(Durable, app),
        freed,
        completer,
        permits,
        stopping,
    )


class Worker:
    """Runs tasks of `app` from `queues` (default: every queue the app declares or uses).

    concurrency     runs at once in this process (None: default_concurrency, 100 if every
                    task of the app is async, else 10)
    lease_seconds   how long a claim stays valid without renewal (renewed every third)
    poll_interval   safety-net poll when no NOTIFY arrives (seconds)
    grace           at shutdown, how long running tasks may finish before release
    retention       how long finished runs and events are kept (None: never prune)
    metrics_port    serve Prometheus metrics on this port (needs pgqueue-jobs[metrics])
    max_runs        drain and stop once this many runs were claimed (exactly that many);
                    with processes: replace a child process after this many runs
    max_memory_mb   drain and stop once the process's RSS exceeds this many MiB; with
                    processes: replace a child whose RSS exceeds it after a run
    processes       run sync tasks' code in this many child processes (processes.py):
                    for CPU-bound code; async tasks and workflows stay in this process.
                    concurrency then defaults to it.
    app_path        MODULE:ATTR the children import the app from (with processes; found
                    in the modules of the app's tasks when not given)
    """

    # Its parts, built on the event loop once it runs (_run_parts), each complete from its
    # constructor: there to read once `started` is set, and after it stopped.
    transitions: Transitions
    stager: Stager
    completer: Completer
    executor: Executor
    lease_keeper: LeaseKeeper
    producer: Producer
    listener: Listener

    def __init__(
        self,
        app: App,
        *,
        queues: list[str] | None = None,
        concurrency: int | None = None,
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
        processes: int | None = None,
        app_path: str | None = None,
    ) -> None:
        if concurrency is not None and concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if lease_seconds < 1:
            raise ValueError("lease_seconds must be >= 1")
        if max_runs is not None and max_runs < 1:
            raise ValueError("max_runs must be >= 1 (or None: no limit)")
        if max_memory_mb is not None and not max_memory_mb > 0:
            raise ValueError("max_memory_mb must be > 0 (or None: no limit)")
        if processes is not None and (isinstance(processes, bool) or processes < 1):
            raise ValueError("processes must be >= 1 (or None: sync tasks run in threads)")
        if processes is not None and sys.platform == "win32":
            raise ValueError("processes need a POSIX system (Linux, macOS): pipes the loop reads")
        if processes is not None and app_path is None:
            app_path = find_app_path(app, app.tasks.values())
            if app_path is None:
                raise ValueError(
                    "processes: give app_path='MODULE:ATTR', where the child processes "
                    "import this app from (it is in none of its tasks' modules)"
                )
        if app_path is not None and ":" not in app_path:
            raise ValueError(f"app_path must look like MODULE:ATTR, not {app_path!r}")
        self.app = app
        self.queues = list(queues) if queues else app.served_queues()
        if concurrency is None:
            concurrency = processes or default_concurrency(app.tasks.values())
        self.concurrency = concurrency
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
        self.processes = processes
        self.app_path = app_path
        self.id = uuid.uuid4()
        self.stats: Counter[str] = Counter()
        if any(t.workflow for t in app.tasks.values()) and app.database.pool is None:
            # Workflow steps write through the App's pool from their threads: with the
            # default 4 connections, 50 concurrent workflows would queue for them.
            app.pool_size = max(app.pool_size, min(concurrency, WORKFLOW_POOL_MAX))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._pool: AsyncConnectionPool[Any] | None = None
        self.dsn = ""  # the DSN of its own connections (connection.worker_dsn), once running
        self.started = threading.Event()
        self.probes = Probes()  # /healthz and /healthz/ready on the metrics port
        self.outage = Outage()  # one "down" and one "back" line per outage, for every part

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
                shutdown.close_loop(loop)
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def stop(self) -> None:
        """Ask the worker to drain and stop; safe from any thread or a signal handler."""
        loop = self._loop
        if loop is not None and self._stop is not None:
            loop.call_soon_threadsafe(self._stop.set)

    # -- main -------------------------------------------------------------------------

    async def run_async(self, burst: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        stop = self._stop = asyncio.Event()
        _logging.install_run_fields()
        use_outage(self.outage)  # the tasks and threads of its parts start from here
        quiet_pool_retries()
        metrics = queue_depth.serve(self.metrics_port, self.probes)
        self.transitions = Transitions(metrics, self.stats)
        # Before registering: a worker that shows up in pgqueue.workers must already drain
        # on SIGTERM (not die of it, leaving its row behind).
        with shutdown.Signals(stop, self.grace, self.install_signal_handlers):
            app = self.app
            registration.register(
                app.dsn,
                app.pooler,
                self.id,
                self.queues,
                self.concurrency,
                declared=app.queues.values(),
                tasks=sorted(app.tasks),
                version=__version__,
                sync_schedules=functools.partial(
                    schedules.sync, registry=app.registry, queues=self.queues
                ),
            )
            self.dsn = connection.worker_dsn(self.app.dsn, self.app.pooler)
            pool = self._pool = connection.open_pool(self.dsn, self.id, self.app.pooler)
            await pool.open(wait=False)
            threads = DaemonThreads(self.concurrency)
            try:
                await self._run_parts(pool, threads, stop, metrics, burst)
            finally:
                await registration.deregister(pool, self.id)
                await pool.close()
                threads.shutdown()
                log.info("worker %s stopped: %s", self.id, dict(self.stats))

    async def _run_parts(
        self,
        pool: AsyncConnectionPool[Any],
        threads: DaemonThreads,
        stop: asyncio.Event,
        metrics: WorkerMetrics | None,
        burst: bool,
    ) -> None:
        """Build the parts on the loop, each given what it uses (so in this order), run
        them until the worker stops, and drain."""
        app = self.app
        wake = asyncio.Event()  # the producer's: set when a slot frees or work may wait
        clock = LeaseClock(self.lease_seconds)  # the lease keeper's renewals
        self.stager = Stager(pool, self.queues, self.stage_interval, wake.set)
        self.completer = Completer(
            pool,
            self.id,
            self.transitions.written,
            wake.set,
            clock.left,
            deferred=self.stager.nudge,  # a sleep or backoff was written: due times moved
        )
        limits = QueueLimits(pool)
        permits = ZombiePermits(self.id, self.lease_seconds, pool, limits)
        processes = None
        if self.processes is not None and self.app_path is not None:
            processes = Processes(
                self.processes,
                self.app_path,
                {"dsn": app.dsn, "pooler": app.pooler, "worker_id": str(self.id)},
                self.grace,
                self.max_runs,
                self.max_memory_mb,
            )
        self.executor = executor = executor_for(
            app,
            self.id,
            threads,
            self.lease_seconds,
            self.stats,
            self.transitions,
            wake.set,
            self.completer,
            permits,
            stop,
            processes,
        )
        self.lease_keeper = LeaseKeeper(
            self.dsn,
            self.id,
            self.lease_seconds,
            executor.leases,
            executor.leases_lost,
            executor.running,
            pooler=app.pooler,
            clock=clock,
        )
        self.producer = producer = Producer(
            executor,
            self.completer,
            self.lease_keeper,
            pool,
            limits,
            self.stager.stage,
            wake,
            stop,
            self.id,
            self.queues,
            self.concurrency,
            self.lease_seconds,
            self.poll_interval,
            self.stats,
            # with child processes, these limits are each child's (Processes)
            max_runs=None if processes else self.max_runs,
            max_memory_mb=None if processes else self.max_memory_mb,
        )
        self.listener = Listener(
            self.dsn,
            pool,
            self.queues,
            executor.held,
            producer.wake,
            executor.lose,
            limits.refresh,
            due=self.stager.nudge,
            idle=producer.idle,
            pick_up=producer.pick_up,
            connect_kwargs=db.connect_kwargs(app.pooler),
        )
        await limits.refresh()
        duties = [
            limits.run(),
            self.completer.run(),
            Rescuer(pool, self.queues, self.rescue_interval).run(),
            WorkerPruner(pool, self.lease_seconds).run(),
            self.stager.run(),
            Scheduler(pool).run(),
            TallyKeeper(pool).run(),
            PriorityAging(pool, self.queues).run(),
        ]
        if self.retention is not None:
            duties.append(Pruner(pool, self.retention).run())
        if metrics is not None:
            duties.append(queue_depth.collect(pool, self.queues, metrics))
        if self.app.listens:
            duties.append(self.listener.run())
        background = [asyncio.create_task(d) for d in duties]
        self.lease_keeper.start()
        # the frames whose local `held` names the attempt running on the loop
        watch = LoopWatch(
            self.lease_seconds,
            {
                _attempt.attempt.__code__,
                _attempt.run_hook.__code__,
                Executor.execute.__code__,
                Executor.write_then_hook.__code__,
            },
        )
        watch.start()
        self.probes.running(watch, self.lease_keeper, self.dsn)
        log.info(
            "worker %s started: queues=%s concurrency=%d lease=%.0fs",
            self.id,
            ",".join(self.queues),
            self.concurrency,
            self.lease_seconds,
        )
        try:
            if processes is not None:
                await processes.start()
            if self.app.listens and not burst:
                # Do not report ready before LISTEN is in place: a run enqueued right
                # after would otherwise wait for the next poll.
                await asyncio.wait_for(self.listener.connected.wait(), 10)
            self.started.set()
            await producer.run(burst)
            self.probes.draining()
            await shutdown.drain(executor, self.completer, self.grace, self.stats)
        finally:
            if processes is not None:
                processes.close()
                await processes.closed()
            await shutdown.cancel(background)
            watch.stop()
            # in a thread: a renewal in flight is waited for, and the loop is not blocked
            await asyncio.to_thread(self.lease_keeper.stop)
