"""The Enqueuer: writes runs and events to the database for an App (every Task.enqueue,
its async twin and enqueue_many end in insert_runs or insert_runs_async), and opens
batches. The statements and their parameters are pgqueue.enqueue.inserts'; each async
call runs the same SQL with the same parameter and result logic as its sync twin."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue.enqueue import batches as _batches
from pgqueue.enqueue import events as _events
from pgqueue.enqueue import inserts as _inserts
from pgqueue.enqueue.group_commit import GroupCommit
from pgqueue.enqueue.options import RunBatch, RunRow
from pgqueue.errors import UserError

if TYPE_CHECKING:
    from pgqueue._tracing import Tracing
    from pgqueue.db.database import Database
    from pgqueue.runs.handle import RunHandle
    from pgqueue.tasks.task import Task

AsyncConn = psycopg.AsyncConnection[Any]

# Takes over an enqueue that cannot join the caller's open transaction (see
# Enqueuer.insert_runs): (enqueuer, rows, trace headers or None) -> handles, inserted
# later by Enqueuer.insert_now.
EnqueueDeferrer = Callable[["Enqueuer", Sequence[RunRow], "str | None"], "list[RunHandle] | None"]


class Enqueuer:
    """Inserts runs and events on `database`.

    `tracing`: spans around enqueues (and a worker's attempts), None unless
    pgqueue.contrib.otel.instrument installed them (then one `is not None` test per
    enqueue). `enqueue_deferrer`: for a caller's transaction that pgqueue cannot join
    (Django on psycopg2): called when neither conn= nor the database's
    connection_provider gave a connection, it returns the runs' handles once it has
    arranged their insert (at the commit), or None to let pgqueue insert them now."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.tracing: Tracing | None = None
        self.enqueue_deferrer: EnqueueDeferrer | None = None
        self._group_commit: GroupCommit | None = None
        # event name -> the workflows started by each of its events (@app.workflow(on_event=))
        self.subscribers: dict[str, list[Task[Any, Any]]] = {}

    def insert_runs(
        self, rows: Sequence[RunRow], *, conn: psycopg.Connection[Any] | None = None
    ) -> list[RunHandle]:
        """Insert prepared rows with one statement; the engine behind every enqueue."""
        if not rows:
            return []
        batch = _batches.active(self.database)
        if batch is not None:  # inside app.batch(): its transaction, its id on the runs
            caller: psycopg.Connection[Any] | None = batch.connection(conn)
            deferrer = None
        else:
            caller = self.database.caller_connection(conn)
            deferrer = self.enqueue_deferrer if caller is None else None
        batch_id = None if batch is None else batch.id
        if self.tracing is not None:
            # A deferred enqueue's span is the caller's enqueue (its runs' ids come later).
            with self.tracing.enqueue(rows) as traced:
                deferred = deferrer(self, rows, traced.headers) if deferrer else None
                if deferred is not None:
                    return deferred
                return traced(self.insert_now(rows, caller, traced.headers, batch_id))
        deferred = deferrer(self, rows, None) if deferrer else None
        if deferred is not None:
            return deferred
        return self.insert_now(rows, caller, None, batch_id)

    def insert_now(
        self,
        rows: Sequence[RunRow],
        caller: psycopg.Connection[Any] | None,
        headers: str | None,
        batch_id: int | None = None,
    ) -> list[RunHandle]:
        """Insert on `caller` (or a pooled connection) now, with the given trace headers
        (and batch): no deferral, no span (an enqueue deferred to a commit is written by
        this)."""
        op = _inserts.Insert(self.database, rows, headers, batch_id)
        with self.database.connection(caller) as c:
            try:
                found = op.found(c.execute(op.query, op.params).fetchone())
            except psycopg.errors.ForeignKeyViolation as exc:
                raise _inserts.dependency_error(exc) from None
            lookup = op.lookup(found)
            existing = c.execute(*lookup).fetchall() if lookup else []
        return op.handles(found, existing)

    async def insert_runs_async(
        self, rows: Sequence[RunRow], *, conn: AsyncConn | None = None
    ) -> list[RunHandle]:
        """The async twin of insert_runs: one statement for the whole batch. A single
        run without a connection of its own (enqueue_async) is written by the loop's
        GroupCommit, together with the other single runs enqueued meanwhile."""
        if not rows:
            return []
        if _batches.active(self.database) is not None:
            raise UserError(
                "enqueue_async inside app.batch() would not join the batch: use enqueue() "
                "or enqueue_many() in the block"
            )
        if self.tracing is not None:
            with self.tracing.enqueue(rows) as traced:
                return traced(await self.insert_now_async(rows, conn, traced.headers))
        if conn is None and len(rows) == 1 and not isinstance(rows, RunBatch):
            loop = asyncio.get_running_loop()
            group = self._group_commit
            if group is None or group.loop is not loop:
                group = self._group_commit = GroupCommit(self.insert_now_async, self.database, loop)
            return [await group.insert(rows[0])]
        return await self.insert_now_async(rows, conn)

    async def insert_now_async(
        self, rows: Sequence[RunRow], conn: AsyncConn | None, headers: str | None = None
    ) -> list[RunHandle]:
        """The async twin of insert_now: one statement now; a traced enqueue takes this
        path (each run's own headers), not GroupCommit's shared one."""
        op = _inserts.Insert(self.database, rows, headers)
        async with self.database.async_connection(conn) as c:
            try:
                found = op.found(await (await c.execute(op.query, op.params)).fetchone())
            except psycopg.errors.ForeignKeyViolation as exc:
                raise _inserts.dependency_error(exc) from None
            lookup = op.lookup(found)
            existing = await (await c.execute(*lookup)).fetchall() if lookup else []
        return op.handles(found, existing)

    # -- batches ------------------------------------------------------------------------

    def batch(
        self,
        on_complete: Task[Any, Any],
        kwargs: Mapping[str, Any] | None = None,
        *,
        conn: psycopg.Connection[Any] | None = None,
    ) -> AbstractContextManager[_batches.Batch]:
        """`with app.batch(on_complete=task, kwargs={...}) as batch:` collects the runs
        enqueued in the block (one transaction: `conn`'s, else its own) and enqueues
        `task(batch={...counts}, **kwargs)` once when the last of them is terminal
        (pgqueue.enqueue.batches)."""
        return _batches.open_batch(self.database, on_complete, kwargs, conn)

    def get_batch(self, batch_id: int) -> _batches.BatchState:
        return _batches.get_batch(self.database, batch_id)

    # -- events -------------------------------------------------------------------------

    def emit_event(
        self,
        event: str,
        *,
        key: str | None = None,
        payload: Any = None,
        delay: float | None = None,
        conn: psycopg.Connection[Any] | None = None,
    ) -> int:
        """Emit an event: wakes every workflow waiting for (event, key) at once, or after
        `delay` seconds, and starts one run of each workflow subscribed to it
        (@app.workflow(on_event=...)) in the same transaction. Joins the caller's
        transaction with `conn=`. Returns its id."""
        params = _events.event_params(self.database, event, key, payload, delay)
        with self.database.connection(self.database.caller_connection(conn)) as c:
            if event not in self.subscribers:
                return _events.emit_event(c, params)
            # one transaction: the caller's (a connection not in autocommit begins one at
            # the first statement and leaves the commit to its owner), else our own
            with c.transaction() if c.autocommit else contextlib.nullcontext():
                event_id = _events.emit_event(c, params)
                self.start_subscribers(c, event, event_id, payload)
            return event_id

    def start_subscribers(
        self, conn: psycopg.Connection[Any], event: str, event_id: int, payload: Any
    ) -> list[RunHandle]:
        """Enqueue, on `conn` (in the transaction that emitted event `event_id`), one run
        of each workflow subscribed to `event`, with the payload as its one argument;
        idempotent on the event's id (pgqueue.tasks.task.EVENT_RUN_KEY)."""
        rows = [task.event_row(event_id, payload) for task in self.subscribers.get(event, ())]
        return self.insert_now(rows, conn, None) if rows else []
