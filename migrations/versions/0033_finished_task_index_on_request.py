"""runs_finished_task_idx (migration 0024) is no longer kept by every database: it is
built on request with runs_live_task_idx, `pgqueue runs search-index --by task`.

Every run that finishes wrote an entry in it: with it and runs_finished_queue_idx a
completion wrote two WAL records and spent about 3.5 us of the server's time per run
more than before either (pg_stat_statements over a drain; bench/RESULTS.md). The queue's
index stays: a queue's finished runs are what an operator lists most. Without this one,
the dashboard's lists of one task's finished runs read SCAN runs a page, as its other
unindexed filters do (docs/dashboard.md). This revision runs once, so it does not drop
one built after it.

Revision ID: 0033
Revises: 0032
"""

from alembic import op  # noqa: F401  (every revision has one: tests record through it)
from pgqueue.migrations import online

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # CONCURRENTLY, outside the revision's transaction: claims and completions go on.
    online.drop_index("runs_finished_task_idx")


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
