"""Semaphores: queue and group concurrency limits, fair groups.

Revision ID: 0004
Revises: 0003
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import online

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Every run belongs to a group; '' is the group of runs enqueued without one. A plain
    # value (never NULL) lets the claim walk groups with equality lookups. Expanded
    # without holding runs (pgqueue.migrations.online): the default first, so that rows
    # inserted meanwhile need no backfill, then the backfill in batches, then NOT NULL.
    op.execute("ALTER TABLE pgqueue.runs ALTER COLUMN group_key SET DEFAULT ''")
    online.backfill("pgqueue.runs", "group_key = ''", "group_key IS NULL")
    online.set_not_null("pgqueue.runs", "group_key")
    # The limited claim walks this index once per group (a loose index scan), reading only
    # the head of each group that has room: a full group's backlog is never read.
    online.create_index(
        "runs_group_claim_idx",
        "ON pgqueue.runs (queue, group_key, priority, id) WHERE state = 'queued'",
    )
    op.execute(Path(__file__).with_suffix(".sql").read_text())


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
