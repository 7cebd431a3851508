"""Rate limits per queue and per group, ordered groups: pgqueue.queues' rate columns,
pgqueue.group_rates, runs_group_order_idx; claim_limited() enforces them.

Revision ID: 0013
Revises: 0012
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    for name in (
        "functions/rate_used",
        "functions/rate_log_add",
        "functions/rate_opens",
        "functions/queue_limits_changed",
        "functions/enqueue",
        "functions/claim_limited",
        "views/groups",
    ):
        op.execute(history.definition(name, revision))
    op.execute(Path(__file__).with_name("0013_queue_stats.sql").read_text())


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
