"""Every pgqueue function runs with `search_path = pg_catalog, pgqueue, pg_temp`, set on the
function itself: a name in its body (format(), jsonb_build_object(), concat_ws(), an
operator) can no longer resolve to a better-matching function that another role created
in a schema of the caller's search_path, such as `public` (docs/security.md).

Revision ID: 0021
Revises: 0020
"""

from importlib import resources

from alembic import op

from pgqueue.db import sql as _sql

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    files = resources.files("pgqueue.sql").joinpath("functions").iterdir()
    for name in sorted(f.name.removesuffix(".sql") for f in files if f.name.endswith(".sql")):
        op.execute(_sql.definition(f"functions/{name}"))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
