"""Every task knows its run: pgqueue.runs.progress (ctx.progress), pgqueue.runs.cancel_reason
(app.cancel(id, reason=)), and a step row while its body runs (state 'running').

Revision ID: 0014
Revises: 0013
"""

from alembic import op
from pgqueue.migrations import history

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# The table changes, then the functions that use them (sql/functions/*.sql).
SCHEMA = """
-- {done, total, message, at} of the run's latest ctx.progress() report, NULL if none.
ALTER TABLE pgqueue.runs ADD COLUMN progress jsonb
    CONSTRAINT runs_progress_check CHECK (jsonb_typeof(progress) = 'object');
-- Why the run was canceled (pgqueue.cancel()'s reason), NULL if not given.
ALTER TABLE pgqueue.runs ADD COLUMN cancel_reason text;
-- A step is recorded 'running' when its body starts, so that an operator sees which step a
-- stuck workflow is in, and since when.
ALTER TABLE pgqueue.steps DROP CONSTRAINT steps_state_check;
ALTER TABLE pgqueue.steps ADD CONSTRAINT steps_state_check
    CHECK (state IN ('running', 'waiting', 'succeeded', 'failed'));
-- pgqueue.cancel() takes a reason: the two-argument form goes (a call with one or two
-- arguments reaches the new one through its defaults).
DROP FUNCTION IF EXISTS pgqueue.cancel(bigint, boolean);
"""


def upgrade() -> None:
    op.execute(SCHEMA)
    op.execute(history.definition("functions/cancel", revision))
    op.execute(history.definition("functions/emit_event", revision))
    op.execute(history.definition("views/running", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
