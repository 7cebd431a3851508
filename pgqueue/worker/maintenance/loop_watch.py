"""The watchdog of the event loop: it tells when task code blocks the loop, and whose."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from types import CodeType, FrameType
from typing import Any

log = logging.getLogger("pgqueue.worker")


class LoopWatch:
    """Warns when the event loop has been blocked for over a third of the lease, naming
    the task whose code blocks it. The loop beats (a timer every `every` seconds, not a
    cost per run); a thread looks at the beat, and at the loop thread's stack when it
    stalls: the attempt running there is found in its frames, so that nothing has to
    record which attempt is on the loop as each one starts. Built on the loop it watches."""

    def __init__(self, lease_seconds: float, attempt_codes: set[CodeType]) -> None:
        self.lease_seconds = lease_seconds
        # the functions whose frames hold an attempt's Held as their local `held`
        self.attempt_codes = attempt_codes
        self.limit = lease_seconds / 3
        self.every = min(0.5, self.limit / 4)
        self.beat = time.monotonic()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._handle: Any = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pgqueue-watchdog", daemon=True)

    def start(self) -> None:
        """On the loop."""
        self._tick()
        self._thread.start()

    def stop(self) -> None:
        """On the loop."""
        if self._handle is not None:
            self._handle.cancel()
        self._stopped.set()

    def _tick(self) -> None:
        self.beat = time.monotonic()
        self._handle = self._loop.call_later(self.every, self._tick)

    def _run(self) -> None:
        warned: float | None = None  # the beat before the stall last warned about
        while not self._stopped.wait(self.every):
            beat = self.beat
            stalled = time.monotonic() - beat
            if stalled > self.limit and warned != beat:
                warned = beat
                log.warning(
                    "the event loop has been blocked for %.1fs (over a third of the %gs "
                    "lease) by %s: leases are still renewed, but nothing else of this worker "
                    "runs meanwhile; call blocking code of an async task in a thread "
                    "(asyncio.to_thread), or make the task sync",
                    stalled,
                    self.lease_seconds,
                    self.culprit(),
                )
            elif warned is not None and beat != warned:
                log.info("the event loop runs again (blocked for about %.1fs)", beat - warned)
                warned = None

    def culprit(self) -> str:
        """What the loop thread is running: the attempt (task and run) if one is on its
        stack, else the innermost function."""
        codes = self.attempt_codes
        top: FrameType | None = sys._current_frames().get(self._loop_thread)
        frame = top
        while frame is not None:
            if frame.f_code in codes:
                held = frame.f_locals.get("held")
                row = getattr(held, "row", None)
                if row is not None:
                    return f"task {row.task!r} (run {row.id})"
            frame = frame.f_back
        if top is None:
            return "unknown code"
        code = top.f_code
        return f"{code.co_qualname} ({code.co_filename}:{top.f_lineno})"
