"""`pgqueue runs cancel|retry` with filters and `pgqueue queues purge`: they say how many
runs match, ask unless --yes, act in batches, and refuse what they cannot do in one line."""

from __future__ import annotations

import io
from typing import Any

import psycopg
import pytest

from tests.cli.helpers import assert_user_error, cli

Conn = psycopg.Connection[Any]


def fill(conn: Conn, queue: str, state: str, n: int) -> None:
    finished = "now()" if state in ("succeeded", "failed", "canceled") else "NULL"
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, state, finished_at) "
        f"SELECT 't', %s, %s, {finished} FROM generate_series(1, %s)",
        (queue, state, n),
    )


def count(conn: Conn, state: str) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.runs WHERE state = %s", (state,)).fetchone()
    return int(row[0]) if row else 0


def answer(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))


def test_bulk_cancel_asks_then_acts(
    capsys: Any, monkeypatch: pytest.MonkeyPatch, dsn: str, conn: Conn
) -> None:
    fill(conn, "mail", "queued", 4)
    fill(conn, "web", "queued", 2)
    answer(monkeypatch, "n\n")
    code, out, err = cli(capsys, "runs", "cancel", "--queue", "mail", "--dsn", dsn)
    assert code == 1 and "cancel 4 runs (queue=mail)?" in err and "nothing changed" in err
    assert count(conn, "canceled") == 0
    answer(monkeypatch, "y\n")
    code, out, err = cli(capsys, "runs", "cancel", "--queue", "mail", "--dsn", dsn)
    assert (code, out) == (0, "4 runs canceled\n")
    code, out, _ = cli(capsys, "runs", "cancel", "--queue", "mail", "--dsn", dsn, "--yes")
    assert (code, out) == (0, "no runs to cancel (queue=mail)\n")
    assert count(conn, "queued") == 2


def test_bulk_retry_with_state_and_batches(capsys: Any, dsn: str, conn: Conn) -> None:
    fill(conn, "q", "failed", 25)
    fill(conn, "q", "succeeded", 3)
    code, out, _ = cli(
        capsys, "runs", "retry", "--state", "failed", "--batch-size", "10", "--yes", "--dsn", dsn
    )
    assert (code, out) == (0, "25 runs queued again\n")
    assert (count(conn, "queued"), count(conn, "succeeded")) == (25, 3)


def test_no_answer_on_stdin_is_a_clear_error(
    capsys: Any, monkeypatch: pytest.MonkeyPatch, dsn: str, conn: Conn
) -> None:
    fill(conn, "q", "queued", 1)
    answer(monkeypatch, "")
    code, _, err = cli(capsys, "runs", "cancel", "--all", "--dsn", dsn)
    question, error = err.splitlines()
    assert code == 2 and question.startswith("cancel 1 runs (all runs)?")
    assert error == "error: 1 runs match and no answer came; pass --yes to cancel them"
    assert count(conn, "queued") == 1


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["runs", "cancel"], ("give a run id, or filters", "--all")),
        (["runs", "retry", "--state", "queued", "--yes"], ("cannot retry runs that are queued",)),
        (["runs", "cancel", "5", "--queue", "q"], ("either a run id or filters", "--queue")),
        (["runs", "cancel", "--older-than", "soon", "--yes"], ("invalid duration 'soon'",)),
        (["runs", "cancel", "--state", "lost"], ("'lost' is not one of",)),
    ],
)
def test_bulk_user_errors(capsys: Any, dsn: str, args: list[str], fragments: tuple[str]) -> None:
    assert_user_error(cli(capsys, *args, "--dsn", dsn), *fragments)


def test_queues_purge_cancels_what_has_not_started(capsys: Any, dsn: str, conn: Conn) -> None:
    fill(conn, "q", "queued", 3)
    fill(conn, "q", "scheduled", 1)
    fill(conn, "q", "waiting", 1)
    fill(conn, "other", "queued", 2)
    code, out, _ = cli(capsys, "queues", "purge", "q", "--yes", "--dsn", dsn)
    assert (code, out) == (0, "4 runs canceled\n")
    assert (count(conn, "queued"), count(conn, "waiting")) == (2, 1)
