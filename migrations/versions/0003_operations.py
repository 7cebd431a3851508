"""Schedules, inspection views and retention.

Revision ID: 0003
Revises: 0002
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    # the texts this revision was released with: no later revision changes these views
    op.execute(history.definition("views/failed", revision))
    op.execute(history.definition("views/workers_live", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
