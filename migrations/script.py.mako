"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
"""

from pathlib import Path

from alembic import op

from pgqueue import _sql  # noqa: F401  (for the definitions of functions and views)

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    # then each function or view this revision creates or changes, from its current file
    # (sql/README.md), e.g. op.execute(_sql.definition("functions/claim_limited"))


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
