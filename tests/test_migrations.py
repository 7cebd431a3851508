"""The schema: migrations apply cleanly, and the fast revision check agrees with alembic."""

from __future__ import annotations

from alembic.config import Config
from alembic.script import ScriptDirectory

from pgqueue import migrate


def test_revision_files_form_the_chain_alembic_sees() -> None:
    with migrate._config(None) as cfg:
        assert isinstance(cfg, Config)
        script = ScriptDirectory.from_config(cfg)
        chain = [r.revision for r in reversed(list(script.walk_revisions()))]
        assert script.get_current_head() == migrate.head()
    assert chain == migrate.revisions()
