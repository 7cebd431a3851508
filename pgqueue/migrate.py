"""Schema migrations through alembic, with the version table in schema pgqueue."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import psycopg
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from psycopg import errors as pg_errors

from pgqueue.errors import NotMigrated


@contextlib.contextmanager
def _config(dsn: str | None, out: io.StringIO | None = None) -> Iterator[Config]:
    with resources.as_file(resources.files("pgqueue.migrations")) as location:
        cfg = Config(output_buffer=out) if out is not None else Config()
        cfg.set_main_option("script_location", str(Path(location)))
        cfg.attributes["dsn"] = dsn
        yield cfg


def head() -> str:
    with _config(None) as cfg:
        revision = ScriptDirectory.from_config(cfg).get_current_head()
    assert revision is not None
    return revision


def upgrade(dsn: str) -> None:
    """Bring the schema to the newest revision. Safe to run again and concurrently."""
    with _config(dsn) as cfg:
        command.upgrade(cfg, "head")


def upgrade_sql() -> str:
    """The SQL a DBA would run to create or update the schema (alembic offline mode)."""
    out = io.StringIO()
    with _config(None, out) as cfg:
        command.upgrade(cfg, "head", sql=True)
    return out.getvalue()


def current(conn: psycopg.Connection[tuple[object, ...]]) -> str | None:
    try:
        with conn.transaction():
            row = conn.execute("SELECT version_num FROM pgqueue.alembic_version").fetchone()
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName):
        return None
    return str(row[0]) if row else None


def check(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Raise NotMigrated (one line, says what to do) unless the schema is at head."""
    found, wanted = current(conn), head()
    if found == wanted:
        return
    if found is None:
        raise NotMigrated("this database has no pgqueue schema: run `pgqueue migrate` first")
    raise NotMigrated(
        f"the pgqueue schema is at revision {found}, this pgqueue needs {wanted}: "
        "run `pgqueue migrate`"
    )
