"""Input limits in SQL: pgqueue.enqueue() and emit_event() refuse deep JSON and long keys.

Revision ID: 0009
Revises: 0008
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    for name in ("json_too_deep", "check_length", "check_depth", "enqueue", "emit_event"):
        op.execute(history.definition(f"functions/{name}", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
