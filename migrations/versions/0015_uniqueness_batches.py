"""Uniqueness scopes (pgqueue.runs.unique_key, unique_while) and batches (pgqueue.batches,
pgqueue.runs.batch_id, the trigger that counts a batch's finished members).

Revision ID: 0015
Revises: 0014
"""

from pathlib import Path

from alembic import op

from pgqueue.db import sql as _sql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for name in ("enqueue_unique", "batch_settle", "batch_note", "batch_flush"):
        op.execute(_sql.definition(f"functions/{name}"))
    op.execute(Path(__file__).with_suffix(".sql").read_text())


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
