"""pgqueue.batch_note(), called by the WHEN condition of the trigger runs_batch_flush,
becomes a PL/pgSQL function: as an SQL function it was inlined into the condition, which
the server prepares once per statement that updates runs, so every claim and completion
parsed its body again (sql/functions/batch_note.sql).

Revision ID: 0019
Revises: 0018
"""

from alembic import op
from pgqueue.migrations import history

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(history.definition("functions/batch_note", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
