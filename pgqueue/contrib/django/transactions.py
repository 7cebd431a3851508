"""Enqueue inside `transaction.atomic()`: the run commits or rolls back with your rows.

Django on psycopg 3 hands out its psycopg Connection, so pgqueue's statement runs in the
same transaction (invariant 5 of the design: the run exists iff the transaction commits).
psycopg2 connections cannot be shared with psycopg 3: there, enqueue_on_commit() defers
the enqueue to the commit instead (the run is then created just after it).
"""

from __future__ import annotations

from typing import Any, ParamSpec

import psycopg
from django.db import connections, transaction

from pgqueue.tasks import BoundTask, Task

P = ParamSpec("P")


def is_psycopg3(alias: str) -> bool:
    try:
        from django.db.backends.postgresql.psycopg_any import is_psycopg3 as flag
    except ImportError:  # no PostgreSQL driver at all
        return False
    return bool(flag) and connections[alias].vendor == "postgresql"


class DjangoTransactions:
    """App.connection_provider: the alias's psycopg connection while the calling thread is
    inside an atomic block, else None (pgqueue then uses its own pool, in autocommit)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.joins = is_psycopg3(alias)

    def __call__(self) -> psycopg.Connection[Any] | None:
        if not self.joins:
            return None
        connection = connections[self.alias]
        if not connection.in_atomic_block:
            return None
        connection.validate_no_broken_transaction()
        connection.ensure_connection()
        raw = connection.connection
        return raw if isinstance(raw, psycopg.Connection) else None


def enqueue_on_commit(
    task: Task[P, Any] | BoundTask[P, Any], /, *args: P.args, **kwargs: P.kwargs
) -> None:
    """Enqueue when the current transaction commits (not at all if it rolls back). For
    psycopg2 projects; on psycopg 3 a plain enqueue() inside atomic() is better (you get
    the run's id, and the run is created atomically with your rows). The arguments are
    checked now, so a bad call fails here rather than after the commit."""
    from pgqueue.contrib.django.conf import database_alias

    bound = task if isinstance(task, BoundTask) else task.options()
    row = bound.task.make_row(args, kwargs, bound.opts)
    app = bound.task.app
    transaction.on_commit(lambda: app.insert_runs([row]), using=database_alias())
