"""The dashboard at a million runs (issue 43): all-time totals of finished runs per queue
and state, kept by the workers' tally (pgqueue.finished_totals, sql/tally_finished.sql);
an audit log of the operators' actions (pgqueue.audit); two partial indexes of finished
runs, by task and by queue, so that a list of finished runs filtered by either reads only
its matches; extended statistics of (state, queue, task), so that the planner's estimate
of a filter's count, which the dashboard shows when an exact count would cost too much,
is close.

Revision ID: 0024
Revises: 0023
"""

from pathlib import Path

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
