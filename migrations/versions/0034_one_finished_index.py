"""runs_finished_queue_idx (queue, finished_at, id) replaces runs_finished_idx
(finished_at): one entry in an index of all finished runs per completion instead of two.

Every run that finishes wrote an entry in each: one WAL record and about 3% of the
server's time per run went to the second (pg_stat_statements over a drain;
bench/RESULTS.md). What read runs_finished_idx by time (the tally, pruning, bulk retries,
the dashboard's list of finished runs, pgqueue.finished_buckets and pgqueue.queue_stats)
now reads the queue's index one queue at a time: a loose index scan over the queues that
have finished runs (sql/parts/finished_queues.sql), then each queue by finish time. The
two views are reloaded from sql/. runs_failed_idx stays: it serves the reads of failed
runs alone. This revision runs once, so it does not drop an index built after it.

Revision ID: 0034
Revises: 0033
"""

from alembic import op
from pgqueue.migrations import history, online

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # the views first, in the revision's transaction: they read the queue's index from now
    for name in ("views/finished_buckets", "views/queue_stats"):
        op.execute(history.definition(name, revision))
    # CONCURRENTLY, outside the revision's transaction: claims and completions go on.
    online.drop_index("runs_finished_idx")


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
