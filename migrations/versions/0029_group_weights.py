"""Weighted fairness between groups (docs/flow_control.md, Group weights):
`app.queue(name, group_weights={"gold": 3}, default_group_weight=1)` and
`pgqueue queues set Q --group-weight gold=3`.

- queues.group_weights (jsonb, NULL: no weights), queues.default_group_weight (1 to 1000),
  queues.group_vtime (the queue's virtual time), queues.group_passes (each weighted
  group's pass). The queues table is small: plain ALTERs, constant defaults.
- pgqueue.claim_limited(): with weights, a priority's runs are handed out by stride
  scheduling (lowest pass first) instead of plain turns; without, as before.

Revision ID: 0029
Revises: 0028
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    op.execute(history.definition("functions/claim_limited", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
