"""The CLI's state-changing commands (`pgqueue runs cancel|retry`, bulk, queues,
schedules, emit, prune) record their actions in the audit log the dashboard shows,
as "cli" (issue 43)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.schedules import schedule as schedules
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


def test_every_state_changing_command_is_recorded(
    capsys: pytest.CaptureFixture[str], app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """Queues paused, resumed and limited, schedules paused, resumed and triggered, an
    event emitted, a prune and a purge: each one row as "cli", under the dashboard's name
    for the same action."""

    @app.periodic(cron="*/10 * * * *", name="tenner")
    @app.task(name="ops.ok")
    def ok() -> None:
        return None

    schedules.sync(conn, app, ["default"])
    dsn = app.dsn
    queued = enqueue(conn, queue="mail")
    steps: list[tuple[str, ...]] = [
        ("queues", "pause", "mail"),
        ("queues", "resume", "mail"),
        ("queues", "set", "mail", "--concurrency", "3", "--rate-limit", "10/s"),
        ("schedules", "pause", "tenner"),
        ("schedules", "resume", "tenner"),
        ("emit", "paid", "--key", "k1"),
        ("queues", "purge", "mail", "--yes"),
        ("prune", "--older-than", "1d", "--state", "canceled"),
    ]
    for step in steps:
        code, _, err = cli(capsys, *step, "--dsn", dsn)
        assert code == 0, (step, err)
    code, out, _ = cli(capsys, "schedules", "trigger", "tenner", "--json", "--dsn", dsn)
    assert code == 0
    triggered = json.loads(out)["id"]
    assert audit(conn) == [
        ("cli", "pause", None, {"queue": "mail"}, 1, None),
        ("cli", "resume", None, {"queue": "mail"}, 1, None),
        ("cli", "limits", None, {"queue": "mail", "concurrency": 3, "rate_limit": "10/s"}, 1, None),
        ("cli", "schedule_pause", None, {"schedule": "tenner"}, 1, None),
        ("cli", "schedule_resume", None, {"schedule": "tenner"}, 1, None),
        ("cli", "emit_event", None, {"event": "paid", "key": "k1"}, 1, None),
        ("cli", "bulk_cancel", None, {"queue": "mail", "state": ["scheduled", "queued"]}, 1, None),
        (
            "cli",
            "prune",
            None,
            {"older_than": "1d", "states": ["canceled"], "events": False, "audit": False},
            0,
            None,
        ),
        ("cli", "schedule_trigger", triggered, {"schedule": "tenner"}, 1, None),
    ]
    assert queued  # canceled by the purge, too recent for the prune
