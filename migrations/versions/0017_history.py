"""History at scale: a tally of finished runs by queue, state and 5-second bucket
(pgqueue.finished_tally, kept by the workers) and pgqueue.finished_buckets over it, so
that pgqueue.queue_stats and the dashboard count what finished in the last hour without
reading an hour of runs; an index for pruning completed batches.

Revision ID: 0017
Revises: 0016
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    for name in ("functions/tally_upto", "views/finished_buckets"):
        op.execute(history.definition(name, revision))
    # queue_stats as this revision left it (the current one reads tables of 0020)
    op.execute(Path(__file__).with_name("0017_queue_stats.sql").read_text())


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
