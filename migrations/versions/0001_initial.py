"""Runs, run errors, queues, workers and the SQL functions enqueue/cancel/retry.

Revision ID: 0001
Revises:
"""

from pathlib import Path

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())


def downgrade() -> None:
    # Dropping the schema would drop alembic's version table with it (it lives in schema
    # pgqueue), and alembic's next write to it would fail the downgrade.
    raise NotImplementedError("pgqueue migrations are forward-only")
