"""Latency histograms in the tally: pgqueue.latency_tally (kept by the workers with the
counts, binned by pgqueue.latency_bin), and pgqueue.queue_stats's pickup and duration
percentiles read from it instead of from every run that finished in the last minute
(sql/views/queue_stats.sql).

Revision ID: 0020
Revises: 0019
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(history.definition("functions/latency_bin", revision))
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    op.execute(history.definition("views/queue_stats", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
