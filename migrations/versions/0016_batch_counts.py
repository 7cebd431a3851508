"""A batch's counters spread over rows (pgqueue.batch_counts, one per batch and slot):
pgqueue.batches becomes a view over pgqueue.batch_heads (the former table) that sums them.
Also pgqueue.enqueue_unique(): a replace whose key is held by a run that is not waiting
(held in a scope of its own) returns that run, as a skip does.

Revision ID: 0016
Revises: 0015
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history, online

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A batch's members in id order: built beside the old index without holding runs
    # (pgqueue.migrations.online), which it then replaces.
    online.create_index(
        "runs_batch_idx_0016", "ON pgqueue.runs (batch_id, id) WHERE batch_id IS NOT NULL"
    )
    op.execute("DROP INDEX pgqueue.runs_batch_idx")
    op.execute("ALTER INDEX pgqueue.runs_batch_idx_0016 RENAME TO runs_batch_idx")
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    for name in (
        "functions/batch_settle",
        "functions/batch_flush",
        "views/batches",
        "functions/enqueue_unique",  # replace of a holder that is not waiting: a skip
    ):
        op.execute(history.definition(name, revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
