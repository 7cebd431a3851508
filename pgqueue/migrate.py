"""Schema migrations through alembic, with the version table in schema pgqueue."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import errors as pg_errors

from pgqueue.errors import NotMigrated, PermissionDenied

log = logging.getLogger("pgqueue")


if TYPE_CHECKING:
    from alembic.config import Config

# alembic (and SQLAlchemy under it) cost about a second to import: they are imported only
# to migrate. Checking the schema version needs just the revision files' names, which
# follow the convention NNNN_name.py in one linear chain (tests/sql/test_migrations.py checks
# that this agrees with alembic).


@contextlib.contextmanager
def _config(dsn: str | None, out: io.StringIO | None = None) -> Iterator[Config]:
    from alembic.config import Config

    with resources.as_file(resources.files("pgqueue.migrations")) as location:
        cfg = Config(output_buffer=out) if out is not None else Config()
        cfg.set_main_option("script_location", str(Path(location)))
        cfg.attributes["dsn"] = dsn
        yield cfg


def head() -> str:
    return revisions()[-1]


def upgrade(dsn: str) -> None:
    """Bring the schema to the newest revision. Safe to run again and concurrently."""
    from alembic import command

    with _config(dsn) as cfg:
        try:
            command.upgrade(cfg, "head")
        except Exception as exc:
            # SQLAlchemy wraps the driver's error as .orig
            cause = getattr(exc, "orig", exc)
            if isinstance(cause, pg_errors.InsufficientPrivilege):
                raise _cannot_migrate(dsn, cause) from None
            raise


def _cannot_migrate(dsn: str, exc: BaseException) -> PermissionDenied:
    from pgqueue import db

    with db.connect(dsn) as conn:
        role, database = conn.info.user, conn.info.dbname
        try:
            fresh = current(conn) is None
        except pg_errors.InsufficientPrivilege:  # the schema exists, unreadable to role
            fresh = False
    if fresh:
        return PermissionDenied(
            f"role {role} cannot create schema pgqueue ({db.first_line(exc)}): migrate once "
            f"as the database's owner, or GRANT CREATE ON DATABASE {database} TO {role}"
        )
    return PermissionDenied(
        f"role {role} cannot migrate ({db.first_line(exc)}): only the owner of schema pgqueue "
        "(the role that first ran `pgqueue migrate`) can; migrate as that role, or have it "
        f"run `pgqueue grants {role} --as owner --apply`"
    )


def upgrade_sql(from_revision: str | None = None) -> str:
    """The SQL a DBA would run to create the schema, or to update it from
    `from_revision` (alembic offline mode)."""
    from alembic import command

    out = io.StringIO()
    with _config(None, out) as cfg:
        if from_revision is not None and from_revision not in revisions():
            raise NotMigrated(
                f"unknown pgqueue schema revision {from_revision!r}; "
                f"known: {', '.join(revisions())}"
            )
        target = f"{from_revision}:head" if from_revision else "head"
        command.upgrade(cfg, target, sql=True)
    return out.getvalue()


def revisions() -> list[str]:
    """Every revision this pgqueue knows, oldest first."""
    versions = resources.files("pgqueue.migrations").joinpath("versions")
    return sorted(
        p.name.split("_", 1)[0]
        for p in versions.iterdir()
        if p.name.endswith(".py") and p.name[:4].isdigit()
    )


def current(conn: psycopg.Connection[tuple[object, ...]]) -> str | None:
    try:
        with conn.transaction():
            row = conn.execute("SELECT version_num FROM pgqueue.alembic_version").fetchone()
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName):
        return None
    return str(row[0]) if row else None


def check(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Raise NotMigrated (one line, says what to do) unless the schema is at head. A schema
    newer than this pgqueue (a rolling deploy: the new release migrated first) is accepted
    with a warning, since migrations only add."""
    found, wanted = current(conn), head()
    if found == wanted:
        return
    if found is None:
        raise NotMigrated("this database has no pgqueue schema: run `pgqueue migrate` first")
    if found not in revisions():
        log.warning(
            "the pgqueue schema (revision %s) is newer than this pgqueue (%s): "
            "upgrade pgqueue on this machine",
            found,
            wanted,
        )
        return
    raise NotMigrated(
        f"the pgqueue schema is at revision {found}, this pgqueue needs {wanted}: "
        "run `pgqueue migrate`"
    )
