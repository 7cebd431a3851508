"""Uniqueness scopes (pgqueue.runs.unique_key, unique_while) and batches (pgqueue.batches,
pgqueue.runs.batch_id, the trigger that counts a batch's finished members).

Revision ID: 0015
Revises: 0014
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history, online

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for name in ("enqueue_unique", "batch_settle", "batch_note", "batch_flush"):
        op.execute(history.definition(f"functions/{name}", revision))
    # Without holding runs for a scan (pgqueue.migrations.online): the columns come with
    # their CHECKs NOT VALID, validated after the commit; the indexes are built
    # CONCURRENTLY.
    op.execute(
        """
        ALTER TABLE pgqueue.runs
            ADD COLUMN IF NOT EXISTS unique_key text,
            ADD COLUMN IF NOT EXISTS unique_while text,
            ADD COLUMN IF NOT EXISTS batch_id bigint,
            DROP CONSTRAINT IF EXISTS runs_unique_key_length,
            ADD CONSTRAINT runs_unique_key_length
                CHECK (octet_length(unique_key) <= 512) NOT VALID,
            DROP CONSTRAINT IF EXISTS runs_unique_while_check,
            ADD CONSTRAINT runs_unique_while_check
                CHECK (unique_while IN ('queued', 'active', 'retained')) NOT VALID
        """
    )
    online.validate("pgqueue.runs", "runs_unique_key_length")
    online.validate("pgqueue.runs", "runs_unique_while_check")
    online.create_index(
        "runs_unique_key_idx",
        """ON pgqueue.runs (unique_key)
    WHERE unique_key IS NOT NULL
      AND (unique_while = 'retained'
           OR (unique_while = 'active'
               AND state IN ('scheduled', 'queued', 'running', 'waiting'))
           OR (unique_while = 'queued'
               AND state IN ('scheduled', 'queued') AND started_at IS NULL))""",
        unique=True,
    )
    online.create_index("runs_batch_idx", "ON pgqueue.runs (batch_id) WHERE batch_id IS NOT NULL")
    op.execute(Path(__file__).with_suffix(".sql").read_text())


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
