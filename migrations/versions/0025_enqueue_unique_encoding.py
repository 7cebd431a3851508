"""pgqueue.enqueue_unique() reads its runs in the one encoding of a run to insert (a JSON
array per run, pgqueue.enqueue.encoding), the document every enqueue statement reads;
a run given as an object, the input before this revision, is read too, so that
producers not upgraded yet keep working. Same signature.

Revision ID: 0025
Revises: 0024
"""

from alembic import op
from pgqueue.migrations import history

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(history.definition("functions/enqueue_unique", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
