"""What a revision uses to change a busy table without holding it (docs/upgrading.md, What
a migration does). A revision's own statements run in its transaction, and an ALTER TABLE
there holds the table's exclusive lock until the revision commits: claims and enqueues
wait for it. So the long parts run outside that transaction, taking no lock a claim or an
enqueue waits for, and the exclusive locks are held for a moment, not for a scan:

- backfill(): an UPDATE of every row that needs it, in batches by id, each committed on
  its own (row locks for a batch at a time).
- validate(): a CHECK or foreign key added NOT VALID in the revision's transaction,
  validated after it commits (SHARE UPDATE EXCLUSIVE: writes go on during the scan).
- set_not_null(): SET NOT NULL without its scan under the exclusive lock: a NOT VALID
  CHECK validated first, which PostgreSQL then takes as proof.
- create_index(): CREATE INDEX CONCURRENTLY (SHARE UPDATE EXCLUSIVE), after dropping an
  invalid leftover of an interrupted build.
- drop_index(): DROP INDEX CONCURRENTLY: it waits for the transactions that use the index,
  and none waits for it.
- add_column(): ADD COLUMN (nullable, no default: no rewrite) in a transaction of its
  own, so that the revision never holds one busy table's lock while it waits for
  another's (claims lock queues then runs, enqueues runs then queues: a cycle).

Each step is safe to run again: a revision whose lock wait timed out is tried again from
its start (pgqueue.db.migrate.upgrade) after some of its steps have committed. The steps
outside the transaction wait for their locks as long as they need (nothing a worker
needs queues behind them), where the revision's own statements give up after
ddl_lock_timeout. In offline mode (`pgqueue migrate --sql`) each is one plain statement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import sqlalchemy
from alembic import op

from pgqueue.db.migrate import DDL_LOCK_TIMEOUT

__all__ = ["add_column", "backfill", "create_index", "drop_index", "set_not_null", "validate"]

BATCH = 10_000


def add_column(table: str, column: str) -> None:
    """ALTER TABLE `table` ADD COLUMN IF NOT EXISTS `column` ("name type", nullable and
    without a default), committed on its own under the revision's lock timeout."""
    statement = f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column}"
    if op.get_context().as_sql:
        op.execute(statement)
        return
    with op.get_context().autocommit_block():
        op.execute(statement)


def backfill(table: str, assignments: str, condition: str) -> None:
    """UPDATE `table` SET `assignments` WHERE `condition`, BATCH ids at a time, from the
    smallest id to the largest when it starts (rows inserted since take the column's
    default, which the revision sets first)."""
    context = op.get_context()
    if context.as_sql:
        op.execute(f"UPDATE {table} SET {assignments} WHERE {condition}")
        return
    with context.autocommit_block():
        bind = op.get_bind()
        low, high = bind.execute(sqlalchemy.text(f"SELECT min(id), max(id) FROM {table}")).one()
        if low is None:
            return
        for start in range(low, high + 1, BATCH):
            bind.execute(
                sqlalchemy.text(
                    f"UPDATE {table} SET {assignments}"
                    f" WHERE id >= :start AND id < :end AND ({condition})"
                ),
                {"start": start, "end": start + BATCH},
            )


def validate(table: str, constraint: str) -> None:
    """Validate `constraint` of `table` (schema-qualified), added NOT VALID before."""
    with op.get_context().autocommit_block():
        op.execute("BEGIN")
        op.execute("SET LOCAL lock_timeout = 0")
        op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {constraint}")
        op.execute("COMMIT")


def set_not_null(table: str, column: str) -> None:
    """ALTER TABLE `table` ALTER COLUMN `column` SET NOT NULL, its scan done by validating
    a CHECK first; the revision's transaction holds the exclusive lock afterwards."""
    check = f"{column}_not_null_proof"
    op.execute(
        f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {check},"
        f" ADD CONSTRAINT {check} CHECK ({column} IS NOT NULL) NOT VALID"
    )
    validate(table, check)
    op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL, DROP CONSTRAINT {check}")


def create_index(name: str, definition: str, *, unique: bool = False) -> None:
    """CREATE [UNIQUE] INDEX CONCURRENTLY `name` `definition` ("ON pgqueue.table ...")."""
    context = op.get_context()
    kind = "UNIQUE INDEX" if unique else "INDEX"
    statement = f"CREATE {kind} CONCURRENTLY IF NOT EXISTS {name} {definition}"
    with context.autocommit_block():
        if context.as_sql:
            op.execute(statement)
            return
        invalid = (
            op.get_bind()
            .execute(
                sqlalchemy.text(
                    "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)"
                ),
                {"name": f"pgqueue.{name}"},
            )
            .scalar()
        )
        with _no_lock_timeout():
            if invalid:
                op.execute(f"DROP INDEX CONCURRENTLY pgqueue.{name}")
            op.execute(statement)


def drop_index(name: str) -> None:
    """DROP INDEX CONCURRENTLY IF EXISTS pgqueue.`name`."""
    context = op.get_context()
    statement = f"DROP INDEX CONCURRENTLY IF EXISTS pgqueue.{name}"
    with context.autocommit_block():
        if context.as_sql:
            op.execute(statement)
            return
        with _no_lock_timeout():
            op.execute(statement)


@contextlib.contextmanager
def _no_lock_timeout() -> Iterator[None]:
    """The statements inside wait for their locks as long as they need (outside the
    revision's transaction, nothing a worker needs queues behind them); then the
    revision's ddl_lock_timeout again."""
    context = op.get_context()
    config = context.config.attributes if context.config is not None else {}
    ddl_lock_timeout = float(config.get("ddl_lock_timeout", DDL_LOCK_TIMEOUT))
    op.execute("SET lock_timeout = 0")
    yield
    op.execute(f"SET lock_timeout = '{max(1, round(ddl_lock_timeout * 1000))}ms'")
