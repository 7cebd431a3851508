"""A timed-out attempt whose thread still runs keeps its permit: pgqueue.zombie_permits.

Revision ID: 0008
Revises: 0007
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    op.execute(history.definition("functions/claim_limited", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
