"""A small pool of daemon threads for sync tasks.

Not concurrent.futures: its threads are joined at interpreter exit, so one stuck task
would keep a stopping worker alive forever. Here a stuck thread is abandoned at exit
(its run was already released or failed, fenced by the lease).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("pgqueue.worker")

# A job: call(arg) in a thread, then sink(arg, result, exception) on the job's loop.
Sink = Callable[[Any, Any, BaseException | None], None]
Job = tuple[Callable[[Any], Any], Any, Sink, asyncio.AbstractEventLoop]
Settled = tuple[Sink, Any, Any, BaseException | None]


class DaemonThreads:
    def __init__(self, size: int, name: str = "pgqueue-task") -> None:
        self.size = size
        self.name = name
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        # Results not yet handed to their loop, by loop. The first result of a batch
        # schedules one callback that settles all that arrived meanwhile: one wake-up of
        # the loop (a write to its self-pipe) for many short jobs, not one each.
        self._done: dict[asyncio.AbstractEventLoop, list[Settled]] = {}

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """fn() in a thread; its result (or exception) through the returned future."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.post(_call, fn, functools.partial(_settle, future))
        return future

    def post(self, call: Callable[[Any], Any], arg: Any, then: Sink) -> None:
        """call(arg) in a thread, then then(arg, result, exception) on this event loop,
        batched with the other jobs that finished meanwhile. No future, no task: the
        cheapest hand-off there is for a job nobody awaits."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._idle == 0 and len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                self._idle += 1
                thread.start()
            self._idle -= 1
        self._jobs.put((call, arg, then, loop))

    def shutdown(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            call, arg, then, loop = job
            try:
                settled: Settled = (then, arg, call(arg), None)
            except BaseException as exc:  # handed to the job's sink
                settled = (then, arg, None, exc)
            with self._lock:
                self._idle += 1
                batch = self._done.get(loop)
                if batch is not None:
                    batch.append(settled)
                    continue
                self._done[loop] = [settled]
            try:
                loop.call_soon_threadsafe(self._settle_batch, loop)
            except RuntimeError:  # the loop is closed: nobody waits for this any more
                with self._lock:
                    self._done.pop(loop, None)

    def _settle_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            batch = self._done.pop(loop, [])
        for then, arg, result, exc in batch:
            try:
                then(arg, result, exc)
            except Exception:
                log.exception("internal error after a job in a worker thread")


def _call(fn: Callable[[], Any]) -> Any:
    return fn()


def _settle(future: asyncio.Future[Any], _fn: Any, result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
