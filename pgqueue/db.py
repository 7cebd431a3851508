"""Connections: DSN checks, friendly connection errors, and the migration check."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote, unquote

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from pgqueue.errors import ConfigError, DatabaseUnavailable, NotMigrated, PermissionDenied

DSN_ENV = "PGQUEUE_DSN"

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


def app_pool_options(max_size: int, pooler: str | None = None) -> dict[str, Any]:
    """What the App's pools (sync and async) share. They start closed: the App opens
    them waiting for their first connection (see pgqueue._pool.open_pool)."""
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
    dsn: str, *, autocommit: bool = True, pooler: str | None = None
) -> psycopg.Connection[tuple[object, ...]]:
    """A new connection, with connection failures turned into one-line ConfigErrors."""
    try:
        return psycopg.connect(dsn, **connect_kwargs(pooler, autocommit=autocommit))
    except psycopg.OperationalError as exc:
        raise cannot_connect(dsn, exc) from None


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
    """Turn 'the schema is not there' into a NotMigrated that says what to run, and a
    missing privilege into a PermissionDenied that names the role (`conn`'s user)."""
    try:
        yield
    except Exception as exc:
        friendly = translated(exc, conn)
        if friendly is None:
            raise
        raise friendly from None


def translated(
    exc: BaseException,
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None = None,
) -> Exception | None:
    """translate_errors' answer for `exc`: the NotMigrated or PermissionDenied to raise
    instead, or None to let it through (for callers that cannot afford a context
    manager: App.connection)."""
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
