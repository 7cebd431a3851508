"""ctx.progress(): a run's latest progress report, stored in pgqueue.runs.progress.

A report is written at once when the last write is a second old or more; otherwise it is
kept, and a timer writes the latest one kept when that second is up (or the attempt's
end does, `flush`, whichever comes first). Every write is fenced by the attempt's lease:
a stale attempt (its lease expired and the run was rescued, or the run was canceled)
changes nothing."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any

from pgqueue.db import payload as _json
from pgqueue.db import sql as _sql
from pgqueue.enqueue.checks import check_text
from pgqueue.errors import InvalidArguments, OutOfRange

if TYPE_CHECKING:
    from pgqueue.db.database import Database

log = logging.getLogger("pgqueue.worker")

EVERY = 1.0  # seconds between two writes of one run's progress, at least
MAX_MESSAGE = 1000  # characters


def progress_doc(done: float, total: float | None, message: str | None) -> dict[str, Any]:
    """{done, total, message}, checked: finite numbers, a short message."""
    for what, value in (("done", done), ("total", total)):
        if value is None and what == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidArguments(f"progress {what} must be a number, not {type(value).__name__}")
        if not math.isfinite(value) or abs(value) > 2**53:
            raise OutOfRange(f"progress {what} must be a finite number, not {value}")
    if message is not None:
        if not isinstance(message, str):
            raise InvalidArguments(
                f"progress message must be a string, not {type(message).__name__}"
            )
        check_text("progress message", message)
        if len(message) > MAX_MESSAGE:
            raise OutOfRange(
                f"progress message is {len(message):,} characters, over {MAX_MESSAGE}: "
                "keep it to a line"
            )
    return {"done": done, "total": total, "message": message}


class Progress:
    """The progress writer of one attempt (made by its first ctx.progress call). Without
    a database (pgqueue.testing.eager) reports are only kept in memory."""

    def __init__(self, database: Database | None, run_id: int, lease_token: str | None) -> None:
        self.database = database
        self.run_id = run_id
        self.lease_token = lease_token
        self.latest: dict[str, Any] | None = None
        self.dirty = False  # `latest` is not written yet
        self._written_at = -math.inf  # time.monotonic() of the last write
        self._timer: threading.Timer | None = None  # writes what is kept, when due
        self._lock = threading.Lock()

    def report(self, doc: dict[str, Any]) -> None:
        with self._lock:
            self.latest = doc
            self.dirty = True
            if self.database is None:
                return
            now = time.monotonic()
            wait = self._written_at + EVERY - now
            if wait > 0:
                if self._timer is None:
                    self._timer = threading.Timer(wait, self._due)
                    self._timer.daemon = True
                    self._timer.start()
                return
            self._written_at = now
            self.dirty = False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write(doc)  # a worker thread (a sync task)
        else:  # an async task, on the worker's event loop: not a blocking write there
            loop.run_in_executor(None, self._write, doc)

    def _due(self) -> None:
        """In the timer's thread: a second since the last write is up."""
        with self._lock:
            self._timer = None
        self.flush()

    def flush(self) -> None:
        """Write the latest report if it was not written yet (when due, and at the
        attempt's end)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not self.dirty or self.database is None:
                return
            self.dirty = False
            self._written_at = time.monotonic()
            doc = self.latest
        assert doc is not None
        self._write(doc)

    def _write(self, doc: dict[str, Any]) -> None:
        assert self.database is not None
        params = {
            "id": self.run_id,
            "lease_token": self.lease_token,
            "progress": _json.dumps(doc, what="progress"),
        }
        try:
            with self.database.connection() as conn:
                conn.execute(_sql.query("set_progress"), params)
        except Exception:  # a report is advisory: it never fails the run
            log.warning("run %s: could not store its progress", self.run_id, exc_info=True)
