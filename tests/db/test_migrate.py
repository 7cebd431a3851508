"""`pgqueue migrate` serialises migrations with an advisory lock, which any role that can
connect may take too: a migration waits for it at most --lock-timeout seconds, then exits
2 with one line naming the session that holds it and what to do."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue.cli import main
from pgqueue.db import migrate
from pgqueue.errors import UserError


@pytest.fixture
def squatter(dsn: str) -> Iterator[tuple[str, psycopg.Connection[tuple[object, ...]]]]:
    """A LOGIN-only role (no pgqueue grant) holding the migration lock, and its session."""
    role = f"pgq_squatter_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        params = conninfo_to_dict(dsn) | {"user": role, "application_name": "squatter"}
        as_role = make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})
        with psycopg.connect(as_role, autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (migrate.MIGRATION_LOCK,))
            yield role, conn
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_held_migration_lock_fails_migrate_in_one_line_naming_the_holder(
    dsn: str,
    squatter: tuple[str, psycopg.Connection[tuple[object, ...]]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    role, conn = squatter
    started = time.monotonic()
    with pytest.raises(SystemExit) as exc:
        main(["migrate", "--dsn", dsn, "--lock-timeout", "0.5"])
    assert time.monotonic() - started < 10
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert f"pid {conn.info.backend_pid}" in err and f"user {role}" in err, err
    assert "'squatter'" in err and "pg_terminate_backend" in err, err
    assert re.search(r"connected since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", err), err

    # from Python: the same error, a UserError
    with pytest.raises(UserError, match="held by backend pid"):
        migrate.upgrade(dsn, lock_timeout=0.2)

    # once the lock is free, migrate goes through
    conn.execute("SELECT pg_advisory_unlock(%s)", (migrate.MIGRATION_LOCK,))
    with pytest.raises(SystemExit) as done:
        main(["migrate", "--dsn", dsn, "--lock-timeout", "5"])
    assert done.value.code == 0


def test_lock_timeout_out_of_range_is_one_line(dsn: str) -> None:
    with pytest.raises(UserError, match="lock_timeout must be"):
        migrate.upgrade(dsn, lock_timeout=0)
