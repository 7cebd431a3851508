"""Backoff of a whole group or queue (docs/flow_control.md):
`raise pgqueue.RetryAfter(seconds, scope="group" | "queue")`.

- queues.backoff_until, queues.group_backoff_until and the table pgqueue.group_backoffs
  (0031_aging_backoff.sql); nullable columns without a default: no rewrite.
- pgqueue.claim_limited() skips a backed-off queue and backed-off groups.

Revision ID: 0031
Revises: 0028 (set to 0030 when merged after 0029 and 0030)
"""

from pathlib import Path

from alembic import op

from pgqueue.db import sql as _sql

revision = "0031"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    op.execute(_sql.definition("functions/claim_limited"))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
