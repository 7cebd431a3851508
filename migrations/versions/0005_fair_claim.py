"""Fair limited claim in O(permits): a round-robin cursor per queue, claim_limited() in SQL.

Revision ID: 0005
Revises: 0004
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import online

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Priority first, then group: "the next group after the cursor that has a queued run at
    # this priority" is one index probe, and a full group's backlog is never read. Built
    # beside the old index without holding runs (pgqueue.migrations.online), which it
    # then replaces.
    online.create_index(
        "runs_group_claim_idx_0005",
        "ON pgqueue.runs (queue, priority, group_key, id) WHERE state = 'queued'",
    )
    op.execute("DROP INDEX pgqueue.runs_group_claim_idx")
    op.execute("ALTER INDEX pgqueue.runs_group_claim_idx_0005 RENAME TO runs_group_claim_idx")
    op.execute(Path(__file__).with_suffix(".sql").read_text())


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
