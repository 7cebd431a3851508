"""`pgqueue runs cancel|retry` record their actions in the audit log the dashboard shows,
as "cli" (issue 43)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.cli.helpers import cli
from tests.dashboard.test_confirm import audit
from tests.dashboard.test_routes import enqueue


def test_the_cli_records_its_actions(
    capsys: pytest.CaptureFixture[str], dsn: str, conn: psycopg.Connection[Any]
) -> None:
    one = enqueue(conn, queue="mail")
    enqueue(conn, queue="mail")
    code, _, _ = cli(capsys, "runs", "cancel", str(one), "--reason", "dup", "--dsn", dsn)
    assert code == 0
    code, _, _ = cli(capsys, "runs", "retry", str(one), "--dsn", dsn)
    assert code == 0
    code, _, _ = cli(capsys, "runs", "cancel", "--queue", "mail", "--yes", "--dsn", dsn)
    assert code == 0
    assert audit(conn) == [
        ("cli", "cancel", one, {}, 1, "dup"),
        ("cli", "retry", one, {}, 1, None),
        ("cli", "bulk_cancel", None, {"queue": "mail"}, 2, None),
    ]
