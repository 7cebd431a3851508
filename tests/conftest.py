"""Test databases: one migrated template, cloned per test by pytest-postgresql.

The server is $PGQUEUE_TEST_DSN when set (CI: the local PostgreSQL 15), else an
embedded PostgreSQL 18 started for this session in a temporary directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pytest_postgresql import factories

import pgqueue
from pgqueue.db import migrate

_embedded: Any = None
_embedded_dir: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _embedded, _embedded_dir
    if hasattr(config, "workerinput"):
        return
    dsn = os.environ.get("PGQUEUE_TEST_DSN")
    if dsn:
        params = conninfo_to_dict(dsn)
        host, port = params.get("host", "127.0.0.1"), params.get("port", 5432)
        user, password = params.get("user", "postgres"), params.get("password")
    else:
        from pgqueue.db import embedded

        _embedded_dir = tempfile.mkdtemp(prefix="pgqueue-test-")
        _embedded = embedded.start(Path(_embedded_dir) / "pg", keep_running=False)
        info = _embedded.get_postmaster_info()
        host, port, user, password = str(info.socket_dir), info.port or 5432, "postgres", None
    config.option.postgresql_host = host
    config.option.postgresql_port = port
    config.option.postgresql_user = user
    config.option.postgresql_password = password


def pytest_unconfigure(config: pytest.Config) -> None:
    if _embedded is not None:
        _embedded.cleanup()
    if _embedded_dir:
        shutil.rmtree(_embedded_dir, ignore_errors=True)


def load_schema(
    host: str, port: int, user: str, dbname: str, password: str | None, **_: Any
) -> None:
    migrate.upgrade(make_dsn(host, port, user, dbname, password))


def make_dsn(host: str, port: Any, user: str, dbname: str, password: str | None) -> str:
    return make_conninfo(
        host=host, port=str(port), user=user, dbname=dbname, password=password or None
    )


# Unique per session, so that concurrent test sessions on one server do not collide.
postgresql_noproc = factories.postgresql_noproc(
    dbname=f"pgqueue_test_{os.getpid()}", load=[load_schema]
)
postgresql = factories.postgresql("postgresql_noproc")


@pytest.fixture
def dsn(postgresql: psycopg.Connection[Any]) -> str:
    """A fresh, migrated database for this test."""
    info = postgresql.info
    return make_dsn(info.host, info.port, info.user, info.dbname, info.password)


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


@pytest.fixture
def app(dsn: str) -> Iterator[pgqueue.App]:
    a = pgqueue.App(dsn)
    yield a
    a.close()


@pytest.fixture
def server_params(postgresql_noproc: Any) -> dict[str, Any]:
    """Host/port/user of the test server (to create extra databases)."""
    return {
        "host": postgresql_noproc.host,
        "port": postgresql_noproc.port,
        "user": postgresql_noproc.user,
        "password": postgresql_noproc.password,
    }
