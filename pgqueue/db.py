"""Connections: DSN checks, friendly connection errors, and the migration check."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from pgqueue.errors import ConfigError, NotMigrated

DSN_ENV = "PGQUEUE_DSN"

# psycopg_pool retries a lost connection with a doubling delay (1, 2, 4, 8, 16 s...) until
# its reconnect_timeout (default 300 s), so after an outage of T seconds a pool could stay
# empty for up to about T more seconds although the server was back. Giving up early lets
# the next request start a fresh attempt at once: pools reconnect within seconds.
RECONNECT_TIMEOUT = 3.0
# How long a pool's caller waits for a connection (and an opening pool for its first).
POOL_TIMEOUT = 10.0


def app_pool_options(max_size: int) -> dict[str, Any]:
    """What the App's pools (sync and async) share. They start closed: the App opens
    them waiting for their first connection (see App._get_pool)."""
    return {
        "min_size": 1,
        "max_size": max_size,
        "kwargs": {"autocommit": True},
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
            f"invalid DSN {redact(dsn)!r}: {first_line(exc)}. Use a URL like "
            "postgresql://user@host:5432/dbname or 'host=... dbname=...'"
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
    return " ".join(f"{k}={v}" for k, v in parts.items())


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection[tuple[object, ...]]:
    """A new connection, with connection failures turned into one-line ConfigErrors."""
    try:
        return psycopg.connect(dsn, autocommit=autocommit)
    except psycopg.OperationalError as exc:
        raise ConfigError(
            f"cannot connect to PostgreSQL ({redact(dsn)}): {first_line(exc)}. "
            "Check the DSN and that the server is running"
        ) from None


def pool_timeout(dsn: str) -> ConfigError:
    """What a pool that could not hand out a connection in time raises instead."""
    return ConfigError(
        f"no database connection within {POOL_TIMEOUT:g}s ({redact(dsn)}): is the server up?"
    )


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Turn 'the schema is not there' into a NotMigrated that says what to run."""
    try:
        yield
    except (
        pg_errors.UndefinedTable,
        pg_errors.InvalidSchemaName,
        pg_errors.UndefinedFunction,
    ) as exc:
        raise NotMigrated(
            f"this database has no (or an outdated) pgqueue schema ({first_line(exc)}): "
            "run `pgqueue migrate` (or app.migrate()) first"
        ) from None
