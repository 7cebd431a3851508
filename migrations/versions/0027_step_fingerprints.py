"""What each workflow step was called as, for the determinism check of replays: the step's
position among the durable operations of its run's execution, and its call (the step
function's qualified name, or the operation and its task or event, with a hash of the
arguments). A replay that calls a recorded step at another position, or as another call,
fails with pgqueue.NonDeterministic instead of returning a result stored for other code.

Both columns are nullable and have no default: adding them rewrites nothing, and the
steps recorded before (or by a release that does not write them) are not checked.

Revision ID: 0027
Revises: 0026
"""

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE pgqueue.steps
            ADD COLUMN IF NOT EXISTS position integer,
            ADD COLUMN IF NOT EXISTS call text
        """
    )


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
