"""runs_live_task_idx (migration 0026) is no longer kept by every database: it is built on
request, `pgqueue runs search-index --by task`, as the argument index is.

Every enqueue and every claim wrote an entry in it (an entry per unfinished version of a
run): bulk enqueues measured 0.78x with it against without it, lower in each of five
pairs (bench/RESULTS.md, "The indexes of the lists at any depth"). Without it the
dashboard's lists of one task's unfinished runs read SCAN runs a page, as its other
unindexed filters do (docs/dashboard.md). A database that wants them exact at any depth
builds it again; this revision runs once, so it does not drop one built after it.

Revision ID: 0032
Revises: 0031
"""

from alembic import op  # noqa: F401  (every revision has one: tests record through it)
from pgqueue.migrations import online

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # CONCURRENTLY, outside the revision's transaction: claims and enqueues go on.
    online.drop_index("runs_live_task_idx")


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
