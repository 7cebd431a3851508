"""A canceled attempt of a limited queue keeps its permit until its code ends:
pgqueue.cancel() files it in pgqueue.zombie_permits (sql/functions/cancel.sql).

Revision ID: 0010
Revises: 0009
"""

from alembic import op
from pgqueue.migrations import history

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(history.definition("functions/cancel", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
