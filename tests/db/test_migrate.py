"""`pgqueue migrate` serialises migrations with an advisory lock, which any role that can
connect may take too: a migration waits for it at most --lock-timeout seconds, then exits
2 with one line naming the session that holds it and what to do. A revision waits for the
lock of a table it alters briefly, and is tried again later, so claims do not wait."""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue.cli import main
from pgqueue.db import migrate
from pgqueue.db import sql as _sql
from pgqueue.errors import UserError
from tests.helpers import empty_database, wait_until


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
    with pytest.raises(UserError, match="ddl_lock_timeout must be"):
        migrate.upgrade(dsn, ddl_lock_timeout=0)
    with pytest.raises(UserError, match="ddl_attempts must be"):
        migrate.upgrade(dsn, ddl_attempts=0)


def test_a_busy_table_makes_a_revision_wait_briefly_and_retry_not_the_claims(
    server_params: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A migration that cannot lock a table it alters (a long transaction reads runs) waits
    at most ddl_lock_timeout, lets the claims queued behind it through, and tries the
    revision again after a pause; after the last attempt it fails in one line, with the
    revisions before applied. Meanwhile no claim waits much longer than ddl_lock_timeout
    (without it, every claim would wait for the long transaction's end)."""
    from alembic import command

    with empty_database(server_params, "pgqueue_ddl_lock") as dsn:
        with migrate._config(dsn) as cfg:
            command.upgrade(cfg, "0021")  # 0022 adds constraints to runs
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO pgqueue.runs (task, queue)"
                " SELECT 't', 'q' FROM generate_series(1, 20000)"
            )
            # this release's claim reads the backoff columns of 0031 (on queues, which
            # 0022 does not lock): added ahead, as 0031 will (IF NOT EXISTS)
            conn.execute(
                "ALTER TABLE pgqueue.queues ADD COLUMN backoff_until timestamptz,"
                " ADD COLUMN group_backoff_until timestamptz"
            )
        claim = _sql.query("claim")
        params = {"queue": "q", "after_priority": -32768, "after_id": 0, "limit": 5}
        params |= {"worker_id": uuid.uuid4(), "lease_seconds": 30}
        waits: list[float] = []
        done = threading.Event()

        def claims() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while not done.is_set():
                    started = time.monotonic()
                    conn.execute(claim, params).fetchall()  # (none left: it still locks runs)
                    waits.append(time.monotonic() - started)

        with psycopg.connect(dsn) as reader:
            reader.execute("SELECT count(*) FROM pgqueue.runs")  # idle in transaction
            reader_pid = reader.info.backend_pid
            claimer = threading.Thread(target=claims)
            claimer.start()
            try:
                wait_until(lambda: len(waits) > 10)
                with (
                    caplog.at_level("WARNING", logger="pgqueue"),
                    pytest.raises(UserError) as failed,
                ):
                    migrate.upgrade(dsn, ddl_lock_timeout=0.3, ddl_attempts=3)
                # the same from the command line: exit 2, one line
                with pytest.raises(SystemExit) as exc:
                    args = ["--ddl-lock-timeout", "0.3", "--ddl-attempts", "1"]
                    main(["migrate", "--dsn", dsn, *args])
                assert exc.value.code == 2
                err = capsys.readouterr().err
                assert err.startswith("error: migration 0022 did not get the lock"), err
                assert err.count("\n") == 1, err
                claimed_during = len(waits)
                wait_until(lambda: len(waits) > claimed_during + 10)
            finally:
                done.set()
                claimer.join(30)
        assert "\n" not in str(failed.value)
        assert str(failed.value).startswith("migration 0022 did not get the lock"), failed.value
        holder = f"backend pid {reader_pid} (user "
        assert holder in str(failed.value) and "idle in transaction" in str(failed.value)
        assert "holds a lock on pgqueue.runs" in str(failed.value), failed.value
        retries = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
        assert len(retries) == 2 and "migration 0022" in retries[0], retries
        assert max(waits) < 0.3 + 0.7, max(waits)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert migrate.current(conn) == "0021"
        # once the long transaction has ended, the migration goes through
        migrate.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert migrate.current(conn) == migrate.head()
            valid = "SELECT bool_and(convalidated) FROM pg_constraint WHERE conname LIKE '%_range'"
            assert conn.execute(valid).fetchone() == (True,)
