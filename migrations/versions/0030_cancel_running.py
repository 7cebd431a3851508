"""on_duplicate="cancel_running" (docs/flow_control.md, Uniqueness): an enqueue whose
unique key an unfinished run holds cancels that run ("replaced by #<id>") and creates its
own. pgqueue.enqueue_unique() reads the option at position 18 of a run's encoding (absent,
from a producer not upgraded yet: false) and inserts with the id it may have reserved for
the reason. Same signature; no schema change (the holder is looked up through
runs_unique_key_idx, as before).

Revision ID: 0030
Revises: 0029
"""

from alembic import op
from pgqueue.migrations import history

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(history.definition("functions/enqueue_unique", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
