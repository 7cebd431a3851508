"""Every pgqueue function runs with `search_path = pg_catalog, pgqueue, pg_temp`, set on the
function itself: a name in its body (format(), jsonb_build_object(), concat_ws(), an
operator) can no longer resolve to a better-matching function that another role created
in a schema of the caller's search_path, such as `public` (docs/security.md).

Revision ID: 0021
Revises: 0020
"""

from alembic import op
from pgqueue.migrations import history

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for name in history.functions(revision):
        op.execute(history.definition(f"functions/{name}", revision))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
