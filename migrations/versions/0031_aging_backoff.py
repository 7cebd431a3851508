"""Backoff of a whole group or queue, and priority aging (docs/flow_control.md):
`raise pgqueue.RetryAfter(seconds, scope="group" | "queue")`,
`app.queue(..., priority_aging=seconds)`.

- queues.backoff_until, queues.group_backoff_until and the table pgqueue.group_backoffs
  (0031_aging_backoff.sql); nullable columns without a default: no rewrite.
- pgqueue.claim_limited() skips a backed-off queue and backed-off groups.
- queues.priority_aging and runs.base_priority (nullable, no default: no rewrite of
  runs; its ADD COLUMN holds runs for a moment, in a transaction of its own).

Revision ID: 0031
Revises: 0030
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import online

from pgqueue.db import sql as _sql

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # runs.base_priority: a run's priority before aging changed it (NULL: never changed),
    # so that the aged priority is computed from it exactly each time
    # (sql/age_priorities.sql). Nullable, no default: no rewrite. In a transaction of its
    # own, before the revision's, which locks pgqueue.queues: holding one of the two
    # while waiting for the other would wait in a cycle with the claims (queues, then
    # runs) or the enqueues (runs, then queues) until the lock timeout, every try.
    online.add_column("pgqueue.runs", "base_priority smallint")
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    op.execute(_sql.definition("functions/claim_limited"))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
