"""Input limits in SQL: pgqueue.enqueue() and emit_event() refuse deep JSON and long keys.

Revision ID: 0009
Revises: 0008
"""

from pathlib import Path

from alembic import op

from pgqueue.db import sql as _sql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    for name in ("json_too_deep", "check_length", "check_depth", "enqueue", "emit_event"):
        op.execute(_sql.definition(f"functions/{name}"))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
