"""Shows the workflow steps that run for a while: their `running` row, written from a
thread of its own once a step has run for SHOWN_AFTER seconds.

Why later, and not when the step starts: the row is only for looking at (nothing reads it
back; a replay looks for `succeeded`), and a step that ends sooner writes its outcome, with
its `started_at`, in the one statement it needs anyway. Written at the start, it would cost every
step a second round trip on the workflow's thread. A step is only started this way while
its worker knows it still holds the run (Durable.step: not lost, not canceled, and the
leases renewed within the last third of the lease); otherwise its `running` row is written
first, on the workflow's thread, as the lease check it is.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from pgqueue.errors import LeaseLost

log = logging.getLogger("pgqueue.worker")

SHOWN_AFTER = 0.1  # seconds a step runs before its `running` row is written
TICK = 0.05  # seconds between two looks at what is due, at least


class Shown:
    """One step's `running` row, to be written at `due` unless the step ends first."""

    __slots__ = ("due", "lock", "state", "write")

    def __init__(self, write: Callable[[], Any], due: float) -> None:
        self.write = write
        self.due = due
        self.state = "pending"  # then "written" or "dropped"
        # held while the row is written: done() waits for a write under way, so the
        # step's outcome always lands after its `running` row
        self.lock = threading.Lock()

    def fire(self) -> None:
        with self.lock:
            if self.state != "pending":
                return
            self.state = "written"
            try:
                self.write()
            except LeaseLost:
                pass  # the step's outcome finds it out and raises
            except Exception as exc:  # only for show: the outcome is what counts
                log.debug("a running step's row was not written: %s", exc)

    def done(self) -> None:
        """The step ended: its row is not written from now on (or has been)."""
        with self.lock:
            if self.state == "pending":
                self.state = "dropped"


class RunningSteps:
    """The steps whose `running` row is due, in one heap, and the thread that writes
    them (started on first use; a daemon, idle while nothing is due)."""

    def __init__(self) -> None:
        self._forget()
        if hasattr(os, "register_at_fork"):  # a forked child has no thread: it starts its own
            os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._due: list[tuple[float, int, Shown]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def show_later(self, write: Callable[[], Any], after: float = SHOWN_AFTER) -> Shown:
        shown = Shown(write, time.monotonic() + after)
        with self._wake:
            heapq.heappush(self._due, (shown.due, next(self._order), shown))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="pgqueue-running-steps", daemon=True
                )
                self._thread.start()
            elif len(self._due) == 1:
                self._wake.notify()  # it waits for something to be due
        return shown

    def _run(self) -> None:
        while True:
            with self._wake:
                # the next row due; a step that ended leaves its entry behind (dropped)
                while not self._due:
                    self._wake.wait()
                wait = self._due[0][0] - time.monotonic()
                if wait > 0:
                    # at most TICK apart: most entries are dropped by the time they are
                    # due, and waking for each would cost a thread switch per step
                    self._wake.wait(max(wait, TICK))
                now = time.monotonic()
                due = []
                while self._due and self._due[0][0] <= now:
                    shown = heapq.heappop(self._due)[2]
                    if shown.state == "pending":
                        due.append(shown)
            for shown in due:
                shown.fire()


RUNNING_STEPS = RunningSteps()
