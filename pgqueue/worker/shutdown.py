"""How a worker stops: SIGTERM or SIGINT drain it (a second one exits at once), draining
lets running attempts finish within the grace period and hands the rest back, and the
event loop is closed without letting task code that ignores cancellation keep the process
alive."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections import Counter
from typing import Any

from pgqueue.states import RunState
from pgqueue.worker._completer import Completer
from pgqueue.worker.executor import Executor
from pgqueue.worker.records import Outcome

log = logging.getLogger("pgqueue.worker")

LEFTOVER_WAIT = 1.0  # seconds a stopped worker waits for tasks it cancelled, at most


async def drain(
    executor: Executor, completer: Completer, grace: float, stats: Counter[str]
) -> None:
    """Stop claiming; let running tasks finish within the grace period; release the rest
    (back to queued, the attempt given back). Attempts whose lease was lost are not
    waited for: their runs are someone else's now."""
    held = executor.held
    waits: list[asyncio.Future[Any]] = [h.task for h in held if h.task is not None and not h.lost]
    if executor.owed_threads():
        waits.append(executor.quiet_threads())
    if waits:
        running = sum(not h.submitted for h in held)
        log.info("draining %d running runs (grace %.0fs)", running, grace)
        await asyncio.wait(waits, timeout=grace)
    leftover = [h for h in held if not h.submitted and not h.lost]
    if leftover:
        log.warning("grace period over: releasing %d runs", len(leftover))
        for h in leftover:
            h.released = True
            h.stop()
        releases = [Outcome(h.id, h.lease_token, RunState.QUEUED, refund=True) for h in leftover]
        written = await asyncio.wait_for(
            asyncio.gather(*(completer.submit(o) for o in releases)), 10
        )
        stats["released"] += sum(written)
    # Outcomes still being written, hooks still running; not the released attempts,
    # whose threads are abandoned (their runs are back in the queue).
    abandoned = {h.task for h in held if h.released or h.lost}
    writing = [t for t in executor.executing if t not in abandoned]
    if writing:
        await asyncio.wait(writing, timeout=5)
    try:  # outcomes whose attempt's task ended at hand-in (Completer.post)
        await asyncio.wait_for(completer.settled(), 5)
    except TimeoutError:
        log.warning("%d outcomes not written at exit", completer.unwritten)


async def cancel(duties: list[asyncio.Task[None]]) -> None:
    """Cancel the worker's duties and wait until every one has ended."""
    for t in duties:
        t.cancel()
    # On Python 3.11, asyncio.wait_for (inside the pool's getconn) swallows a cancel that
    # lands just as a connection is handed over, and that duty would then run on forever:
    # cancel again until every duty has ended.
    pending = set(duties)
    while pending:
        _, pending = await asyncio.wait(pending, timeout=1)
        for t in pending:
            t.cancel()
    await asyncio.gather(*duties, return_exceptions=True)


class Signals:
    """SIGTERM and SIGINT set `stop` (the worker drains); a second one exits at once.
    Installed only from the main thread, and only when `install` is true."""

    def __init__(self, stop: asyncio.Event, grace: float, install: bool) -> None:
        self.stop = stop
        self.grace = grace
        self.install = install and threading.current_thread() is threading.main_thread()
        self.received = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> Signals:
        """On the loop."""
        if self.install:
            self._loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self._on_signal, sig)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        self.received += 1
        if self.received > 1:
            log.warning(
                "second %s: exiting now; held runs are rescued when their leases expire", sig.name
            )
            os._exit(1)
        log.info(
            "%s: finishing running tasks (grace %.0fs); send it again to exit now",
            sig.name,
            self.grace,
        )
        self.stop.set()


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
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
