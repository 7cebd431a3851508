"""Connections: DSN checks, friendly connection errors, and the migration check."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote, unquote

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue.errors import (
    ConfigError,
    DatabaseFull,
    DatabaseUnavailable,
    NotMigrated,
    PermissionDenied,
)

log = logging.getLogger("pgqueue")

DSN_ENV = "PGQUEUE_DSN"

# The search_path of every pgqueue connection, given as a startup parameter: builtins
# resolve from pg_catalog and pgqueue's objects from pgqueue, never from a schema that
# another role can write to (`public`, where every role may create objects on PostgreSQL
# 13 and 14): a function or operator created there that matches a call's argument types
# better than the builtin would otherwise run, as pgqueue's role, in pgqueue's statements
# (docs/security.md, "search_path"). A startup parameter, not a SET: it costs no round
# trip and ends with the connection. Through a pooler, which does not forward it, the
# role's own setting does the same (pinned_path_missing).
SEARCH_PATH = "pg_catalog, pgqueue, pg_temp"
# The exception: the App's pools (sync and async) keep the session's own search_path.
# Their connections are the caller's as much as pgqueue's (`app.connection()` runs the
# caller's own SQL in the transaction of an enqueue, and task code uses it too), and a
# pinned path would hide the caller's tables. pgqueue's statements on them are written to
# mean the same on any search_path that searches pg_catalog first (the default): its
# objects named with their schema, its functions pinning their own path, builtins called
# with exact argument types or qualified (tests/e2e/test_search_path.py plants overloads and
# runs them through the App on an unpinned session).
PIN_SEARCH_PATH = "-c search_path=pg_catalog,pgqueue,pg_temp"

# psycopg_pool retries a lost connection with a doubling delay (1, 2, 4, 8, 16 s...) until
# its reconnect_timeout (default 300 s), so after an outage of T seconds a pool could stay
# empty for up to about T more seconds although the server was back. Giving up early lets
# the next request start a fresh attempt at once: pools reconnect within seconds.
RECONNECT_TIMEOUT = 3.0
# How long a pool's caller waits for a connection (and an opening pool for its first).
POOL_TIMEOUT = 10.0


POOLER_ENV = "PGQUEUE_POOLER"
# What sits between pgqueue and PostgreSQL (App(pooler=...), PGQUEUE_POOLER, --pooler):
# nothing, a pooler that gives each client a server connection for its whole session, or
# one that gives it a server connection for one transaction at a time (docs/scaling.md).
POOLERS = ("none", "session", "transaction")


def resolve_pooler(pooler: str | None) -> str | None:
    """Argument > PGQUEUE_POOLER > none; None for no pooler, else "session" or
    "transaction"; a ConfigError for anything else."""
    given = pooler if pooler is not None else os.environ.get(POOLER_ENV)
    value = (given or "none").strip().lower()
    if value not in POOLERS:
        source = "pooler" if pooler is not None else POOLER_ENV
        raise ConfigError(
            f"{source} must be one of {', '.join(POOLERS)}, not {given!r} "
            "(transaction: for PgBouncer's pool_mode=transaction)"
        )
    return None if value == "none" else value


def connect_kwargs(pooler: str | None, *, autocommit: bool = True) -> dict[str, Any]:
    """psycopg.connect's keyword arguments for pgqueue's connections. Through a pooler in
    transaction mode, no server-side prepared statement: the next statement may run on
    another server connection, where the statement does not exist, or another client's
    statement of the same name does."""
    kwargs: dict[str, Any] = {"autocommit": autocommit}
    if pooler == "transaction":
        kwargs["prepare_threshold"] = None
    return kwargs


def startup_options(dsn: str, *settings: str) -> str:
    """The `options` startup parameter that adds `settings` (each "-c name=value") to
    what the DSN (or else PGOPTIONS, which libpq reads only when a DSN has none) asks
    for; later settings win."""
    given = conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS")
    return " ".join([str(given), *settings]) if given else " ".join(settings)


# DSNs whose server (an undeclared pooler) refused the startup parameter: pgqueue
# connects to them without it, and said so once.
_refused: set[str] = set()
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def pinned_dsn(dsn: str, pooler: str | None) -> str:
    """The DSN pgqueue's own connections to `dsn` use: with search_path pinned at startup
    when no pooler sits in between (a pooler refuses startup parameters)."""
    if pooler is not None or dsn in _refused:
        return dsn
    return make_conninfo(dsn, options=startup_options(dsn, PIN_SEARCH_PATH))


def refuses_startup_options(exc: BaseException) -> bool:
    """Whether a connection failed because the server (a pooler: PgBouncer says
    "unsupported startup parameter: options") refused the `options` parameter."""
    return "startup parameter" in str(exc)


def warn_once(key: str, dsn: str, message: str, *args: object) -> None:
    with _warned_lock:
        if (key, dsn) in _warned:
            return
        _warned.add((key, dsn))
    log.warning(message, *args)


def refused(dsn: str, exc: BaseException) -> None:
    """`dsn`'s server refused the startup parameters: connect without them from now on."""
    _refused.add(dsn)
    warn_once(
        "refused",
        dsn,
        "the server refused the startup parameter options (%s): a connection pooler? "
        "Declare it (App(pooler=...), PGQUEUE_POOLER or --pooler session|transaction) and "
        "pin the role's search_path (docs/security.md)",
        first_line(exc),
    )


def _path_entries(value: str) -> list[str]:
    return [part.strip().strip('"') for part in value.split(",") if part.strip()]


def pinned_path_missing(search_path: str) -> bool:
    """Whether a session's search_path (SHOW search_path) lets a schema other than
    pg_catalog and pgqueue (and pg_temp, never searched for functions and operators) take
    part in resolving names."""
    entries = _path_entries(search_path)
    return entries[:2] != ["pg_catalog", "pgqueue"] or any(e != "pg_temp" for e in entries[2:])


def check_search_path(found: str, role: str, dsn: str, asked: bool) -> None:
    """Warn (once per DSN) unless the session's search_path (`found`: SHOW search_path)
    is pinned: through a pooler, where no startup parameter reaches the server, by the
    role's own setting; else (`asked`) by the startup parameter, which a pooler that
    ignores it (PgBouncer's ignore_startup_parameters = options) drops unseen."""
    if not pinned_path_missing(found):
        return
    why = (
        "the server did not apply pgqueue's startup parameter options (a pooler that "
        "ignores it? declare it: --pooler session|transaction)"
        if asked
        else "through a pooler pgqueue cannot pin search_path itself"
    )
    warn_once(
        "search_path",
        dsn,
        "%s, and role %s has search_path %s: run ALTER ROLE %s SET search_path = %s "
        "(`pgqueue grants` prints it; docs/security.md)",
        why,
        role,
        found,
        quote_ident(role),
        SEARCH_PATH,
    )


def quote_ident(name: str) -> str:
    """A role name as SQL text, for messages that quote a statement to run."""
    return '"' + name.replace('"', '""') + '"'


def app_pool_options(max_size: int, pooler: str | None = None) -> dict[str, Any]:
    """What the App's pools (sync and async) share. They start closed: the App opens
    them waiting for their first connection (see pgqueue.db.pool.open_pool)."""
    return {
        "min_size": 1,
        "max_size": max_size,
        "kwargs": connect_kwargs(pooler),
        "timeout": POOL_TIMEOUT,
        "reconnect_timeout": RECONNECT_TIMEOUT,
        "open": False,
    }


def resolve_dsn(dsn: str | None) -> str:
    """Argument > PGQUEUE_DSN > a clear error."""
    dsn = dsn or os.environ.get(DSN_ENV)
    if not dsn:
        raise ConfigError(
            "no database configured: pass App(dsn=...) or --dsn, or set PGQUEUE_DSN "
            "(for a local try-out, `pgqueue demo` starts an embedded server)"
        )
    return check_dsn(dsn)


def check_dsn(dsn: str) -> str:
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(
            scrub(
                f"invalid DSN {redact(dsn)!r}: {first_line(exc)}. Use a URL like "
                "postgresql://user@host:5432/dbname or 'host=... dbname=...'",
                [dsn],
            )
        ) from None
    return dsn


def redact(dsn: str) -> str:
    """The DSN without its password, for messages and logs."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    if "password" in parts:
        parts["password"] = "***"
    return scrub(" ".join(f"{k}={v}" for k, v in parts.items()), [dsn])


# Where a password sits in a DSN-like text: a URI's userinfo (user:PASSWORD@), a key=value
# pair (password=PASSWORD, quoted or not) and a URI query parameter (?password=PASSWORD).
_USERINFO = re.compile(
    r"(?P<keep>[a-z][a-z0-9+.-]*://[^\s:/@?#\[\]]*:)(?P<secret>[^\s@/?#]*)@", re.I
)
_KEYWORD = re.compile(
    r"(?P<keep>\bpassword\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'?|[^\s&#'\"]*)", re.I
)
# Shorter passwords are scrubbed where they stand in a DSN only: removing every "ab" from
# a message would make it unreadable without protecting anything more.
_MIN_SEARCHED = 4


def passwords(dsn: str) -> set[str]:
    """Every spelling of the password of `dsn` that a message might quote: as parsed, as
    written in the text (percent-encoded, quoted), decoded and re-encoded."""
    found: set[str] = set()
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        password = None
    if password:
        found.add(str(password))
    for pattern in (_USERINFO, _KEYWORD):
        for match in pattern.finditer(dsn):
            secret = match.group("secret")
            if secret:
                found.add(secret)
                found.add(secret.strip("'"))
    for secret in list(found):
        found.update({unquote(secret), quote(secret, safe=""), quote(unquote(secret), safe="")})
    return {s for s in found if s}


def scrub(text: str, dsns: Iterable[str | None] = ()) -> str:
    """`text` with every password of `dsns` and every password-shaped part of a DSN
    replaced by ***: what every message that may quote a DSN goes through last."""
    for dsn in dsns:
        if not dsn:
            continue
        for secret in sorted(passwords(dsn), key=len, reverse=True):
            if len(secret) >= _MIN_SEARCHED:
                text = text.replace(secret, "***")
    text = _USERINFO.sub(lambda m: m.group("keep") + "***@", text)
    return _KEYWORD.sub(lambda m: m.group("keep") + "***", text)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def connect(
    dsn: str, *, autocommit: bool = True, pooler: str | None = None, pin: bool = True
) -> psycopg.Connection[tuple[object, ...]]:
    """A new connection, with search_path pinned (see pinned_dsn) and checked, and
    connection failures turned into one-line ConfigErrors. Through a pooler (declared, or
    found because it refused the startup parameter) the role's own setting must pin it.
    `pin=False`: the session's own search_path, unchecked (the App's pools, which are the
    caller's connections too: see USER_PATH)."""
    kwargs = connect_kwargs(pooler, autocommit=autocommit)
    if not pin:
        try:
            return psycopg.connect(dsn, **kwargs)
        except psycopg.OperationalError as exc:
            raise cannot_connect(dsn, exc) from None
    target = pinned_dsn(dsn, pooler)
    try:
        conn = psycopg.connect(target, **kwargs)
    except psycopg.OperationalError as exc:
        if target == dsn or not refuses_startup_options(exc):
            raise cannot_connect(dsn, exc) from None
        refused(dsn, exc)
        return connect(dsn, autocommit=autocommit, pooler=pooler)
    # One look (these connections open pools, start workers, run a CLI command or a
    # migration; the pools' own connections take the DSN as it is found to work here).
    row = conn.execute("SHOW search_path").fetchone()
    if not autocommit:
        conn.rollback()  # handed over outside a transaction, as connected
    check_search_path(str(row[0]) if row else "", conn.info.user, dsn, target != dsn)
    return conn


async def aconnect(
    dsn: str, *, pooler: str | None = None, pin: bool = True
) -> psycopg.AsyncConnection[Any]:
    """connect(), for asyncio (autocommit)."""
    kwargs = connect_kwargs(pooler)
    if not pin:
        try:
            return await psycopg.AsyncConnection.connect(dsn, **kwargs)
        except psycopg.OperationalError as exc:
            raise cannot_connect(dsn, exc) from None
    target = pinned_dsn(dsn, pooler)
    try:
        conn = await psycopg.AsyncConnection.connect(target, **kwargs)
    except psycopg.OperationalError as exc:
        if target == dsn or not refuses_startup_options(exc):
            raise cannot_connect(dsn, exc) from None
        refused(dsn, exc)
        return await aconnect(dsn, pooler=pooler)
    row = await (await conn.execute("SHOW search_path")).fetchone()
    check_search_path(str(row[0]) if row else "", conn.info.user, dsn, target != dsn)
    return conn


def cannot_connect(dsn: str, exc: BaseException) -> ConfigError:
    """The one-line ConfigError of a connection attempt that failed."""
    return ConfigError(
        scrub(
            f"cannot connect to PostgreSQL ({redact(dsn)}): {first_line(exc)}. "
            "Check the DSN and that the server is running",
            [dsn],
        )
    )


def pool_timeout(dsn: str) -> DatabaseUnavailable:
    """What a pool that could not hand out a connection in time raises instead."""
    return DatabaseUnavailable(
        f"no database connection within {POOL_TIMEOUT:g}s ({redact(dsn)}): is the server up?"
    )


def permission_denied(exc: BaseException, role: str | None) -> PermissionDenied:
    """A one-line PermissionDenied naming the role and the command that fixes it."""
    who = role or "<this role>"
    return PermissionDenied(
        f"{first_line(exc)}: role {who} lacks pgqueue's grants; the owner of schema pgqueue "
        f"can run `pgqueue grants {who} --as worker --apply` (or --as producer / reader; "
        "see docs/security.md)"
    )


@contextlib.contextmanager
def translate_errors(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None = None,
) -> Iterator[None]:
    """Turn 'the schema is not there' into a NotMigrated that says what to run, a
    missing privilege into a PermissionDenied that names the role (`conn`'s user), and a
    full disk into a DatabaseFull."""
    try:
        yield
    except Exception as exc:
        friendly = translated(exc, conn)
        if friendly is None:
            raise
        raise friendly from None


def database_full(exc: BaseException) -> DatabaseFull:
    """The DatabaseFull for PostgreSQL's disk_full error `exc`."""
    return DatabaseFull(
        f"the database server is out of disk space ({first_line(exc)}): nothing was written; "
        "free space on its data directory's filesystem and try again"
    )


def translated(
    exc: BaseException,
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None = None,
) -> Exception | None:
    """translate_errors' answer for `exc`: the NotMigrated, PermissionDenied or
    DatabaseFull to raise instead, or None to let it through (for callers that cannot
    afford a context manager: App.connection)."""
    if isinstance(exc, pg_errors.DiskFull):
        return database_full(exc)
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        role = conn.info.user if conn is not None and not conn.closed else None
        return permission_denied(exc, role)
    if isinstance(
        exc,
        (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName, pg_errors.UndefinedFunction),
    ):
        return NotMigrated(
            f"this database has no (or an outdated) pgqueue schema ({first_line(exc)}): "
            "run `pgqueue migrate` (or app.migrate()) first"
        )
    return None
