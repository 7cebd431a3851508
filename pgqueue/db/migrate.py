"""Schema migrations through alembic, with the version table in schema pgqueue."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import errors as pg_errors

from pgqueue._version import __version__
from pgqueue.db import sql as _sql
from pgqueue.errors import NotMigrated, OutOfRange, PermissionDenied, UserError

log = logging.getLogger("pgqueue")

# The advisory lock that serialises migrations (migrations/env.py). Any constant works; it
# only has to be the same for every pgqueue process.
MIGRATION_LOCK = 7_364_203_911
# How long a migration waits for that lock by default, in seconds.
LOCK_TIMEOUT = 60.0
# How long a migration's statement waits for a table's lock (lock_timeout), in seconds:
# while an ALTER TABLE waits for its exclusive lock, every claim and enqueue on that table
# waits behind it, so it gives up early and its revision is tried again (DDL_ATTEMPTS
# times, pausing DDL_PAUSE seconds, doubled each time up to DDL_PAUSE_MAX).
DDL_LOCK_TIMEOUT = 0.5
DDL_ATTEMPTS = 10
DDL_PAUSE = 0.5
DDL_PAUSE_MAX = 5.0

# Who holds the migration lock: the advisory lock of a bigint key is stored as its high
# and low 32 bits (classid, objid) with objsubid 1.
_HOLDER = """
SELECT a.pid, a.usename, a.application_name, a.backend_start
  FROM pg_catalog.pg_locks l
  JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
   AND l.database = (SELECT oid FROM pg_catalog.pg_database
                      WHERE datname = pg_catalog.current_database())
   AND l.classid::bigint = %(key)s >> 32 AND l.objid::bigint = %(key)s & 4294967295
 LIMIT 1
"""


if TYPE_CHECKING:
    from alembic.config import Config

# The compatibility window (docs/upgrading.md), in one place: for each revision after which
# the code of older releases no longer works, the oldest release whose code does. A schema
# at revision R needs pgqueue >= NEEDS[the newest key <= R]. Every release's code works
# with the schema of the release after it (operators migrate first, then roll workers), so
# a revision that breaks older code waits for the release after the one that stops relying
# on what it changes (expand, then contract a release later).
# `pgqueue migrate` writes what the head needs on the version table ('pgqueue >= X.Y.Z'),
# where a release older than the schema reads it (check()): a release that knows it is
# too old says "upgrade pgqueue to >= X.Y.Z" instead of failing at its first query.
NEEDS = {
    "0001": "0.1.0",
    # 0.1.0's enqueue writes runs.group_key NULL, which 0004 makes NOT NULL
    "0004": "0.2.0",
}

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


def upgrade(
    dsn: str,
    lock_timeout: float = LOCK_TIMEOUT,
    ddl_lock_timeout: float = DDL_LOCK_TIMEOUT,
    ddl_attempts: int = DDL_ATTEMPTS,
) -> None:
    """Bring the schema to the newest revision. Safe to run again and concurrently: a
    migration waits for another one's end, up to `lock_timeout` seconds, and then raises
    a UserError naming the session that holds the migration lock.

    Each revision runs in a transaction of its own, and waits for a table's lock at most
    `ddl_lock_timeout` seconds (claims and enqueues queue behind a waiting ALTER TABLE);
    a revision that did not get its locks is tried again after a pause, up to
    `ddl_attempts` times, and then a UserError says where to look for what holds them."""
    from alembic import command

    if not 0 < lock_timeout <= 86400:
        raise OutOfRange(
            f"lock_timeout must be more than 0 and at most 86400 seconds, not {lock_timeout!r}"
        )
    if not 0 < ddl_lock_timeout <= 600:
        raise OutOfRange(
            "ddl_lock_timeout must be more than 0 and at most 600 seconds, "
            f"not {ddl_lock_timeout!r}"
        )
    if not 1 <= ddl_attempts <= 100:
        raise OutOfRange(f"ddl_attempts must be 1 to 100, not {ddl_attempts!r}")
    with _config(dsn) as cfg:
        cfg.attributes["lock_timeout"] = lock_timeout
        cfg.attributes["ddl_lock_timeout"] = ddl_lock_timeout
        for attempt in range(1, ddl_attempts + 1):
            cfg.attributes["holds_migration_lock"] = False
            try:
                command.upgrade(cfg, "head")
                return
            except Exception as exc:
                # SQLAlchemy wraps the driver's error as .orig
                cause = getattr(exc, "orig", exc)
                if isinstance(cause, pg_errors.InsufficientPrivilege):
                    raise _cannot_migrate(dsn, cause) from None
                if not isinstance(cause, pg_errors.LockNotAvailable):
                    raise
                if not cfg.attributes["holds_migration_lock"]:
                    raise _locked(dsn, lock_timeout) from None
                revision = _next_revision(dsn)
                if attempt == ddl_attempts:
                    raise UserError(
                        f"migration {revision} did not get the lock of a table it changes "
                        f"within {ddl_lock_timeout:g}s, {ddl_attempts} times: "
                        f"{_table_lock_holder(dsn)}; end that transaction (SELECT "
                        "pg_terminate_backend(PID)) and run `pgqueue migrate` again (the "
                        "migrations before it are applied)"
                    ) from None
                pause = min(DDL_PAUSE_MAX, DDL_PAUSE * 2 ** (attempt - 1))
                log.warning(
                    "migration %s did not get the lock of a table it changes within %gs "
                    "(attempt %d of %d): trying again in %gs",
                    revision,
                    ddl_lock_timeout,
                    attempt,
                    ddl_attempts,
                    pause,
                )
                time.sleep(pause)


def _table_lock_holder(dsn: str) -> str:
    """Who has held a lock on a pgqueue table longest, in words."""
    from pgqueue.db import connect as db

    with db.connect(dsn) as conn:
        row = conn.execute(_sql.query("table_lock_holder")).fetchone()
    if row is None:
        return "the transaction that held it has ended since"
    pid, user, application, state, since, table = row
    held = f" since {since:%Y-%m-%d %H:%M:%S %Z}" if since else ""
    return (
        f"backend pid {pid} (user {user}, application_name {application or ''!r}, "
        f"{state or 'state hidden'}{held}) holds a lock on pgqueue.{table}"
    )


def _next_revision(dsn: str) -> str:
    """The revision a failed migration was applying: the first one pending."""
    from pgqueue.db import connect as db

    with db.connect(dsn) as conn:
        waiting = pending(current(conn))
    return waiting[0] if waiting else head()


def _locked(dsn: str, waited: float) -> UserError:
    """The one-line error of a migration that did not get the migration lock in time."""
    from pgqueue.db import connect as db

    with db.connect(dsn) as conn:
        row = conn.execute(_HOLDER, {"key": MIGRATION_LOCK}).fetchone()
    if row is None:
        holder = "a session that has let it go since"
    else:
        pid, user, application, since = row
        holder = f"backend pid {pid} (user {user}, application_name {application or ''!r}"
        # (the start is hidden from a role that may not see that session's details)
        holder += f", connected since {since:%Y-%m-%d %H:%M:%S %Z})" if since else ")"
    return UserError(
        f"the migration lock (advisory lock {MIGRATION_LOCK}) is held by {holder}: not "
        f"free within {waited:g}s. If that is another `pgqueue migrate`, wait for it and "
        "run this again (or pass --lock-timeout SECONDS); otherwise end that session "
        "(SELECT pg_terminate_backend(PID)) and run this again"
    )


def _cannot_migrate(dsn: str, exc: BaseException) -> PermissionDenied:
    from pgqueue.db import connect as db

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


def pending(found: str | None) -> list[str]:
    """The revisions a schema at revision `found` (None: no schema) still needs, oldest
    first; none when it is at head or newer than this pgqueue."""
    known = revisions()
    if found is None:
        return known
    if found not in known:
        return []
    return known[known.index(found) + 1 :]


def describe(found: str | None, waiting: list[str]) -> str:
    """One line: where the schema is and what `pgqueue migrate` would run."""
    if found is None:
        return (
            f"no pgqueue schema: {len(waiting)} migrations pending ({waiting[0]} to "
            f"{head()}); run `pgqueue migrate`"
        )
    if found not in revisions():
        return f"the pgqueue schema (revision {found}) is newer than this pgqueue ({head()})"
    if not waiting:
        return f"the pgqueue schema is current (revision {found})"
    what = waiting[0] if len(waiting) == 1 else f"{waiting[0]} to {waiting[-1]}"
    return (
        f"the pgqueue schema is at revision {found}: {len(waiting)} migration"
        f"{'s' if len(waiting) > 1 else ''} pending ({what}); run `pgqueue migrate`"
    )


def current(conn: psycopg.Connection[tuple[object, ...]]) -> str | None:
    try:
        with conn.transaction():
            row = conn.execute("SELECT version_num FROM pgqueue.alembic_version").fetchone()
    except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName):
        return None
    return str(row[0]) if row else None


def needs(revision: str) -> str:
    """The oldest pgqueue release whose code works with a schema at `revision` (NEEDS)."""
    return NEEDS[max(r for r in NEEDS if r <= revision)]


def needs_comment(revision: str) -> str:
    """What `pgqueue migrate` writes on the version table for a schema at `revision`."""
    return f"pgqueue >= {needs(revision)}"


def _release(version: str) -> tuple[int, ...]:
    """'0.2.0' -> (0, 2, 0); a suffix (0.3.0.dev1, 0.3.0rc1) counts as that release."""
    numbers = (re.match(r"\d*", part) for part in version.split(".")[:3])
    return tuple(int(m[0] or 0) if m else 0 for m in numbers)


def _needed(conn: psycopg.Connection[tuple[object, ...]]) -> str | None:
    """The release the schema says it needs, or None when it says nothing."""
    with conn.transaction():
        row = conn.execute(_sql.query("schema_needs")).fetchone()
    found = re.fullmatch(r"pgqueue >= (\d+\.\d+\.\d+)", str(row[0])) if row else None
    return found[1] if found else None


def check(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Raise NotMigrated (one line, says what to do) unless the schema is at head. A schema
    newer than this pgqueue (a rolling deploy: the new release migrated first) is accepted
    with a warning while it says that this release still works with it (NEEDS), and
    refused with "upgrade pgqueue to >= X" when it needs a newer release."""
    found, wanted = current(conn), head()
    if found == wanted:
        return
    if found is None:
        raise NotMigrated("this database has no pgqueue schema: run `pgqueue migrate` first")
    if found not in revisions():
        needed = _needed(conn)
        if needed is not None and _release(__version__) < _release(needed):
            raise NotMigrated(
                f"the pgqueue schema (revision {found}) needs pgqueue >= {needed}, and this "
                f"is pgqueue {__version__}: upgrade pgqueue to >= {needed} on this machine"
            )
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
