"""Batches: the runs enqueued in one `with app.batch(on_complete=task) as batch:` block,
and the callback enqueued once when the last of them is terminal.

The block is one transaction (the caller's `conn=`, else one of the App's connections).
It opens a row of pgqueue.batches, every enqueue inside it (enqueue, enqueue_many, the
caller's conn=) writes the batch's id on its runs, and the end of the block seals the
batch with the number of its members. Counting the finished members and enqueuing the
callback happen in the database (sql/functions/batch_note.sql, batch_flush.sql): in the
transaction that finishes the last member, whichever worker or path finishes it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue.db import payload as _json
from pgqueue.db import sql as _sql
from pgqueue.errors import InvalidArguments, UserError

if TYPE_CHECKING:
    from pgqueue.db.database import Database
    from pgqueue.tasks.task import Task

_active: ContextVar[Batch | None] = ContextVar("pgqueue_batch", default=None)


@dataclass(frozen=True)
class BatchState:
    """A batch as pgqueue.batches holds it. `total` is None until the batch is sealed;
    `completed_at` is set when the callback (`callback_run_id`) was enqueued."""

    id: int
    on_complete: str
    total: int | None
    succeeded: int
    failed: int
    canceled: int
    callback_run_id: int | None
    created_at: datetime
    sealed_at: datetime | None
    completed_at: datetime | None

    @property
    def done(self) -> bool:
        return self.completed_at is not None


class Batch:
    """An open batch (inside its block), then a handle on it: `id`, `wait()`."""

    def __init__(
        self, database: Database, batch_id: int, conn: psycopg.Connection[Any] | None
    ) -> None:
        self.database = database
        self.id = batch_id
        self._conn = conn  # while the block runs

    def __repr__(self) -> str:
        return f"<Batch {self.id}>"

    def connection(self, conn: psycopg.Connection[Any] | None) -> psycopg.Connection[Any]:
        """The connection an enqueue inside the block uses: the batch's (`conn` must be
        that one or None)."""
        assert self._conn is not None
        if conn is not None and conn is not self._conn:
            raise UserError(
                f"an enqueue inside app.batch() (batch {self.id}) used another connection: "
                "pass the batch's conn= to app.batch(conn=...) and to the enqueues, or none"
            )
        return self._conn

    def end(self) -> None:
        """The block is over: no enqueue joins the batch any more."""
        self._conn = None

    def state(self) -> BatchState:
        return get_batch(self.database, self.id)

    def wait(self, timeout: float | None = None, poll_interval: float = 0.2) -> BatchState:
        """Block until every member is terminal and the callback was enqueued; the batch's
        counts then. Raises TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = min(0.02, poll_interval)
        while True:
            state = self.state()
            if state.done:
                return state
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"batch {self.id}: {_finished(state)} of {state.total} members "
                    f"finished in {timeout}s"
                )
            left = poll_interval if deadline is None else deadline - time.monotonic()
            time.sleep(max(0.0, min(pause, left)))
            pause = min(pause * 2, poll_interval)


def _finished(state: BatchState) -> int:
    return state.succeeded + state.failed + state.canceled


def active(database: Database) -> Batch | None:
    """The batch whose block is running in this context for `database`, if any."""
    batch = _active.get()
    return batch if batch is not None and batch.database is database else None


@contextmanager
def open_batch(
    database: Database,
    on_complete: Task[Any, Any],
    kwargs: Mapping[str, Any] | None,
    conn: psycopg.Connection[Any] | None,
) -> Iterator[Batch]:
    from pgqueue.tasks.task import Task

    if not isinstance(on_complete, Task):
        raise InvalidArguments(
            f"app.batch(on_complete=...) takes a task (an @app.task function), "
            f"not {type(on_complete).__name__}"
        )
    if _active.get() is not None:
        raise UserError("app.batch() blocks do not nest: close the outer batch first")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InvalidArguments(f"app.batch(kwargs=...) must be a dict, not {type(kwargs).__name__}")
    if kwargs is not None and "batch" in kwargs:
        raise InvalidArguments(
            "app.batch(kwargs=...) cannot hold 'batch': the callback receives the batch's "
            "counts under that name"
        )
    params = {
        "on_complete": on_complete.name,
        "queue": on_complete.queue,
        "priority": on_complete.priority,
        "max_attempts": on_complete.max_attempts,
        "kwargs": _json.dumps(
            dict(kwargs or {}),
            what="the kwargs of a batch's callback",
            limit=database.max_payload_bytes,
            max_depth=database.max_json_depth,
        ),
    }
    caller = database.caller_connection(conn)
    with database.connection(caller) as c:
        if caller is None:
            with c.transaction():
                yield from _block(database, c, params)
        else:
            yield from _block(database, c, params)


def _block(
    database: Database, conn: psycopg.Connection[Any], params: dict[str, Any]
) -> Iterator[Batch]:
    row = conn.execute(_sql.query("batch_open"), params).fetchone()
    assert row is not None
    batch = Batch(database, int(row[0]), conn)
    token = _active.set(batch)
    try:
        yield batch
    finally:
        _active.reset(token)
        batch.end()
    # reached only when the block raised nothing: an exception rolls the batch back
    conn.execute(_sql.query("batch_seal"), {"id": batch.id})
    conn.execute(_sql.query("batch_settle"), {"id": batch.id})


def get_batch(database: Database, batch_id: int) -> BatchState:
    with database.connection() as c:
        row = c.execute(_sql.query("get_batch"), {"id": batch_id}).fetchone()
    if row is None:
        raise UserError(f"batch {batch_id} does not exist (never committed, or pruned)")
    return BatchState(*row)
