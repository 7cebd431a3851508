"""The runs of a queue whose only limit is a queue-level rate limit are not flagged
`limited`: the flag means "claimed by claim_limited()" (sql/parts/queue_flags_runs.sql).

Revision ID: 0018
Revises: 0017
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    for name in (
        "functions/enqueue",
        "functions/enqueue_unique",
        "functions/queue_limits_changed",
    ):
        op.execute(history.definition(name, revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
