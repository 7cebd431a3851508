"""Hostile strings: no message shows a password, and no terminal gets raw escape bytes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.cli import main
from pgqueue.db import connect as db

SECRET = "s3cretpw"


MALFORMED = [
    f"postgresql://u:{SECRET}@[::1",  # libpq's message quotes the whole URI
    "postgresql://u:s3cret%70w@[::1",
    f"postgresql://u:{SECRET}@h/db?sslmode=bogus&x=1",
    f"password={SECRET} host=h port=5432 sslmode=bogus x=1",
    f"postgresql://u@h/db?password={SECRET}&x=1",
]
UNREACHABLE = [
    f"postgresql://u:{SECRET}@127.0.0.1:1/x?connect_timeout=2",
    f"host=127.0.0.1 port=1 password='{SECRET}' connect_timeout=2",
]


def test_app_never_shows_its_password_whatever_the_dsn() -> None:
    for dsn in MALFORMED:
        with pytest.raises(pgqueue.ConfigError) as exc:
            pgqueue.App(dsn=dsn)
        assert SECRET not in str(exc.value) and "s3cret%70w" not in str(exc.value), dsn
        assert "\n" not in str(exc.value)
    for dsn in UNREACHABLE:
        app = pgqueue.App(dsn=dsn)
        with pytest.raises(pgqueue.ConfigError) as exc:
            app.list_runs()
        assert SECRET not in str(exc.value) and "cannot connect" in str(exc.value), dsn


def test_scrub_removes_every_spelling_of_the_password() -> None:
    dsn = "postgresql://u:p%40ss%20word@h/db"
    text = f"failed: {dsn} (p@ss word) p%40ss%20word"
    assert "p@ss" not in db.scrub(text, [dsn]) and "p%40ss" not in db.scrub(text, [dsn])
    assert db.scrub("host=h password='a b' port=1") == "host=h password=*** port=1"
    assert db.scrub("postgresql://me:xy@h/db") == "postgresql://me:***@h/db"


def test_control_characters_in_runs_list_and_show_are_escaped(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    evil = "\x1b]0;owned\x07\x1b[2Jtask\u202e"
    run_id = conn.execute(
        "SELECT pgqueue.enqueue(%s, '[]'::jsonb, queue => %s)", (evil, "q\x1b[31m")
    ).fetchone()[0]  # type: ignore[index]
    conn.execute(
        "INSERT INTO pgqueue.run_errors (run_id, attempt, kind, message, traceback)"
        " VALUES (%s, 1, 'error', %s, %s)",
        (run_id, "boom\x1b[5m", "Traceback\n  line\x1b[0m\n"),
    )
    for args in (["stats"], ["queues"], ["runs", "list"], ["runs", "show", str(run_id)]):
        with pytest.raises(SystemExit) as exc:
            main([*args, "--dsn", dsn])
        out, _ = capsys.readouterr()
        assert exc.value.code == 0
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out, out
        assert "q\\x1b[31m" in out, out
    assert "\\x1b]0;owned\\x07" in out and "boom\\x1b[5m" in out and "\n  line\\x1b[0m" in out
