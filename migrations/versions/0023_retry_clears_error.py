"""pgqueue.retry() clears the run's last error and cancel reason when it queues the run
again: a queued run showed the error of the attempt before the retry (every attempt's
error stays in pgqueue.run_errors).

Revision ID: 0023
Revises: 0022
"""

from alembic import op
from pgqueue.migrations import history

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(history.definition("functions/retry", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
