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
from pgqueue.migrations import online

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    # Finished runs of one task, or of one queue, most recently finished first: the lists
    # filtered by task or queue read their matches only. Partial: a run enters them once,
    # when it finishes (enqueue, claim and retry never touch them). Built CONCURRENTLY,
    # outside the revision's transaction: claims and enqueues go on meanwhile.
    finished = "WHERE state IN ('succeeded', 'failed', 'canceled')"
    online.create_index(
        "runs_finished_task_idx", f"ON pgqueue.runs (task, finished_at, id) {finished}"
    )
    online.create_index(
        "runs_finished_queue_idx", f"ON pgqueue.runs (queue, finished_at, id) {finished}"
    )


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
