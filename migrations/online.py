"""What a revision uses to change a busy table without holding it (docs/upgrading.md, What
a migration does): statements that take no lock a claim or an enqueue waits for, run
outside the revision's transaction, so that the revision's exclusive locks (ALTER TABLE)
are held for a moment, not for a scan of the table.

- validate(): a CHECK or foreign key added NOT VALID in the revision's transaction is
  validated after it commits (SHARE UPDATE EXCLUSIVE: writes go on during the scan).

It waits for their locks as long as they need (nothing queues behind them that a worker
needs), where the revision's own statements give up after ddl_lock_timeout.
"""

from __future__ import annotations

from alembic import op


def validate(table: str, constraint: str) -> None:
    """Validate `constraint` of `table` (schema-qualified), added NOT VALID before."""
    with op.get_context().autocommit_block():
        op.execute("BEGIN")
        op.execute("SET LOCAL lock_timeout = 0")
        op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {constraint}")
        op.execute("COMMIT")
