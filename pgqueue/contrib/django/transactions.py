"""Enqueue inside `transaction.atomic()`: the run commits or rolls back with your rows.

Django on psycopg 3 hands out its psycopg Connection, so pgqueue's statement runs in the
same transaction (the run exists if and only if the transaction commits).
A psycopg2 connection cannot be shared with psycopg 3: there, enqueue falls back to
`transaction.on_commit` (the run is inserted just after the commit, not at all after a
rollback), and returns a PendingRunHandle whose id is known once the commit is done.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ParamSpec

import psycopg
from django.db import connections, transaction

from pgqueue.enqueue.options import RunRow
from pgqueue.errors import PgQueueError
from pgqueue.runs.handle import RunHandle
from pgqueue.tasks.task import BoundTask, Task

if TYPE_CHECKING:
    from pgqueue.db.database import Database
    from pgqueue.enqueue.enqueuer import Enqueuer

P = ParamSpec("P")


def is_psycopg3(alias: str) -> bool:
    """Whether the alias's backend runs on psycopg 3 (Django's postgresql backend does
    whenever it can import it; a third-party backend may not)."""
    connection = connections[alias]
    driver = getattr(connection, "Database", None)  # the DB-API module of the backend
    return connection.vendor == "postgresql" and getattr(driver, "__name__", "") == "psycopg"


class RunNotCommitted(PgQueueError, AttributeError):
    """The id of a run enqueued at commit (psycopg2), read before the commit, or after a
    rollback (then there is no run)."""


class PendingRunHandle(RunHandle):
    """What enqueue returns inside atomic() when Django runs on psycopg2: the run is
    inserted when the transaction commits, so `id` (and wait(), get()...) work once the
    atomic block is over; before that, or after a rollback, they raise RunNotCommitted."""

    def __init__(self, database: Database) -> None:
        object.__setattr__(self, "database", database)

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not set yet: id and created, until the commit.
        if name in ("id", "created"):
            raise RunNotCommitted(
                "this run is enqueued when the transaction commits (Django on psycopg2): "
                "its id exists after the atomic block, and not at all if it rolls back"
            )
        raise AttributeError(name)

    @property
    def committed(self) -> bool:
        return "id" in self.__dict__

    def inserted(self, handle: RunHandle) -> None:
        """The run was inserted at the commit, as `handle`."""
        object.__setattr__(self, "id", handle.id)
        object.__setattr__(self, "created", handle.created)

    def __repr__(self) -> str:
        if self.committed:
            return f"PendingRunHandle(id={self.id}, created={self.created})"
        return "PendingRunHandle(id=<at commit>)"

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


class DjangoTransactions:
    """The App's connection_provider and enqueue_deferrer for a DATABASES alias (by
    default PGQUEUE['DATABASE'] as the settings say at each call).

    As the provider: the alias's psycopg connection while the calling thread is inside an
    atomic block, else None (pgqueue then uses its own pool, in autocommit). As the
    deferrer: inside an atomic block whose connection pgqueue cannot join (psycopg2), the
    insert waits for `transaction.on_commit`."""

    def __init__(self, alias: str | None = None) -> None:
        self._alias = alias

    @property
    def alias(self) -> str:
        if self._alias is not None:
            return self._alias
        from pgqueue.contrib.django.conf import database_alias

        return database_alias()

    def __call__(self) -> psycopg.Connection[Any] | None:
        connection = connections[self.alias]
        if not connection.in_atomic_block:
            return None
        connection.validate_no_broken_transaction()
        connection.ensure_connection()
        raw = connection.connection
        return raw if isinstance(raw, psycopg.Connection) else None

    def defer(
        self, enqueuer: Enqueuer, rows: Sequence[RunRow], headers: str | None = None
    ) -> list[RunHandle] | None:
        alias = self.alias
        connection = connections[alias]
        if not connection.in_atomic_block:
            return None
        connection.validate_no_broken_transaction()
        pending = [PendingRunHandle(enqueuer.database) for _ in rows]
        transaction.on_commit(
            functools.partial(_insert_at_commit, enqueuer, list(rows), headers, pending),
            using=alias,
        )
        return [*pending]


def _insert_at_commit(
    enqueuer: Enqueuer, rows: list[RunRow], headers: str | None, handles: list[PendingRunHandle]
) -> None:
    # With the trace context of the enqueue's span, which ended when enqueue returned.
    inserted = enqueuer.insert_now(rows, None, headers)
    for pending, handle in zip(handles, inserted, strict=True):
        pending.inserted(handle)


def enqueue_on_commit(
    task: Task[P, Any] | BoundTask[P, Any], /, *args: P.args, **kwargs: P.kwargs
) -> PendingRunHandle:
    """Enqueue when the current transaction commits (not at all if it rolls back), on
    psycopg 3 as on psycopg2; outside an atomic block, at once. The arguments are checked
    now, so a bad call fails here rather than after the commit. A plain enqueue() inside
    atomic() is usually better: on psycopg 3 it is atomic with your rows (no run lost if
    the process dies between the commit and the insert), and on psycopg2 it does this."""
    from pgqueue.contrib.django.conf import database_alias

    bound = task if isinstance(task, BoundTask) else task.options()
    row = bound.task.make_row(args, kwargs, bound.opts)
    enqueuer = bound.task.enqueuer
    handle = PendingRunHandle(enqueuer.database)
    headers = None
    if enqueuer.tracing is not None:
        # the span of this call, not the commit's
        with enqueuer.tracing.enqueue([row]) as traced:
            headers = traced.headers
    transaction.on_commit(
        functools.partial(_insert_at_commit, enqueuer, [row], headers, [handle]),
        using=database_alias(),
    )
    return handle
