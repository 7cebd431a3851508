"""Input limits in SQL: pgqueue.enqueue() and emit_event() refuse deep JSON and long keys.

Revision ID: 0009
Revises: 0008
"""

from pathlib import Path

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
