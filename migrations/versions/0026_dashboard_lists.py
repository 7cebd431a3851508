"""The dashboard's lists of unfinished runs filtered by task (issue 43): a partial index
of the unfinished runs keyed by task and state, so that a list of one task's queued,
scheduled, running or waiting runs reads its matches only, a full page at any depth.

Partial: a run is in it from its enqueue until it finishes; finished runs (the history,
nearly every row) are not, and runs_finished_task_idx serves those. bench/RESULTS.md has
what it costs an enqueue and a worker (`python -m bench.dashboard_indexes --set
live_task`).

Revision ID: 0026
Revises: 0025
"""

from alembic import op  # noqa: F401  (every revision has one: tests record through it)
from pgqueue.migrations import online

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Built CONCURRENTLY, outside the revision's transaction: claims and enqueues go on
    # meanwhile.
    online.create_index(
        "runs_live_task_idx",
        "ON pgqueue.runs (task, state, id)"
        " WHERE state IN ('scheduled', 'queued', 'running', 'waiting')",
    )


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
