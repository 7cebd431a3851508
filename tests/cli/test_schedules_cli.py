"""`pgqueue schedules`: list, pause, resume, trigger (the schedules themselves:
tests/schedules/test_schedule.py)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg

import pgqueue
from pgqueue.schedules import schedule as schedules
from tests.cli.helpers import assert_user_error, cli
from tests.helpers import scalar
from tests.schedules.test_schedule import fire_round


def test_schedules_cli_list_pause_resume_trigger(
    capsys: Any, app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    @app.periodic(cron="*/10 * * * *", name="tenner", args=[3])
    @app.task(name="ops.ok")
    def ok(n: int = 0) -> int:
        return n

    schedules.sync(conn, app, ["default"])
    code, out, _ = cli(capsys, "schedules", "--dsn", app.dsn, "--json")
    assert code == 0
    [row] = json.loads(out)
    assert (row["name"], row["cron"], row["tz"], row["enabled"], row["paused"]) == (
        "tenner",
        "*/10 * * * *",
        "UTC",
        True,
        False,
    )
    code, out, _ = cli(capsys, "schedules", "--dsn", app.dsn)
    assert code == 0 and "tenner" in out and "NEXT_FIRE_AT" in out

    assert cli(capsys, "schedules", "pause", "tenner", "--dsn", app.dsn)[0] == 0
    assert scalar(app.dsn, "SELECT paused FROM pgqueue.schedules") is True
    conn.execute("UPDATE pgqueue.schedules SET next_fire_at = now() - interval '1 hour'")
    assert fire_round(app.dsn) == 0  # paused: not fired
    assert cli(capsys, "schedules", "resume", "tenner", "--dsn", app.dsn)[0] == 0
    paused, next_at, now = conn.execute(
        "SELECT paused, next_fire_at, now() FROM pgqueue.schedules"
    ).fetchone()  # type: ignore[misc]
    assert paused is False and now < next_at <= now + timedelta(minutes=10)  # missed skipped

    code, out, _ = cli(capsys, "schedules", "trigger", "tenner", "--dsn", app.dsn, "--json")
    assert code == 0
    run = app.get_run(json.loads(out)["id"])
    assert (run.task, run.args, run.state) == ("ops.ok", [3], "queued")

    for action in ("pause", "resume", "trigger"):
        assert_user_error(
            cli(capsys, "schedules", action, "nope", "--dsn", app.dsn), "no schedule named 'nope'"
        )
