"""The CLI: commands work, user errors are one line on stderr with exit code 2."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from typing import Any

import pytest

import pgqueue
from pgqueue.worker._gc import YOUNG_THRESHOLD
from tests.cli.helpers import assert_user_error, cli
from tests.helpers import ROOT


def test_enqueue_list_show_cancel_retry(capsys: Any, dsn: str, app: pgqueue.App) -> None:
    code, out, _ = cli(
        capsys,
        "enqueue",
        "noop",
        "--dsn",
        dsn,
        "--app",
        "tests.apps.basic:app",
        "--args",
        "[5]",
        "--json",
    )
    assert code == 0
    run_id = json.loads(out)["id"]
    code, out, _ = cli(capsys, "runs", "list", "--dsn", dsn, "--json")
    assert [r["id"] for r in json.loads(out)] == [run_id]
    code, out, _ = cli(capsys, "runs", "show", str(run_id), "--dsn", dsn)
    assert code == 0 and "queued" in out
    assert cli(capsys, "runs", "cancel", str(run_id), "--dsn", dsn)[0] == 0
    assert_user_error(cli(capsys, "runs", "cancel", str(run_id), "--dsn", dsn), "finished")
    assert cli(capsys, "runs", "retry", str(run_id), "--dsn", dsn)[0] == 0
    assert app.get_run(run_id).state == "queued"
    code, out, _ = cli(capsys, "queues", "--dsn", dsn, "--json")
    assert json.loads(out)[0]["queued"] == 1
    assert cli(capsys, "queues", "pause", "default", "--dsn", dsn)[0] == 0
    code, out, _ = cli(capsys, "queues", "--dsn", dsn)
    assert code == 0 and "paused" in out.splitlines()[1]
    code, out, _ = cli(capsys, "workers", "--dsn", dsn, "--json")
    assert code == 0 and json.loads(out) == []


def test_burst_worker_from_the_cli(capsys: Any, dsn: str, app: pgqueue.App) -> None:
    h = app.enqueue_by_name("noop", [3])
    code, _, _ = cli(capsys, "worker", "--dsn", dsn, "--app", "tests.apps.basic:app", "--burst")
    assert code == 0
    assert app.get_run(h.id).result == 3


def test_the_cli_worker_tunes_the_collector_and_restores_it(
    capsys: Any, dsn: str, app: pgqueue.App
) -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    base = ["worker", "--dsn", dsn, "--app", "tests.apps.basic:app", "--burst"]
    tuned = app.enqueue_by_name("gc_state")
    assert cli(capsys, *base)[0] == 0
    young, frozen = app.get_run(tuned.id).result
    assert young == YOUNG_THRESHOLD != before[0] and frozen > 1000
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    plain = app.enqueue_by_name("gc_state")
    assert cli(capsys, *base, "--no-tune-gc")[0] == 0
    assert app.get_run(plain.id).result == [before[0], 0]


def test_user_errors(capsys: Any, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    assert_user_error(cli(capsys, "runs", "list"), "no database configured")
    assert_user_error(cli(capsys, "runs", "list", "--dsn", "not a dsn"), "invalid DSN")
    assert_user_error(
        cli(capsys, "runs", "list", "--dsn", "postgresql://x@127.0.0.1:1/x?connect_timeout=2"),
        "cannot connect",
    )
    assert_user_error(cli(capsys, "runs", "show", "424242", "--dsn", dsn), "no run with id")
    assert_user_error(
        cli(capsys, "enqueue", "noop", "--dsn", dsn, "--args", "{oops"), "--args is not valid JSON"
    )
    assert_user_error(cli(capsys, "enqueue", "noop", "--dsn", dsn, "--args", "{}"), "JSON array")
    assert_user_error(
        cli(capsys, "enqueue", "nope", "--dsn", dsn, "--app", "tests.apps.basic:app"),
        "unknown task 'nope'",
    )
    assert_user_error(cli(capsys, "enqueue", "nope", "--dsn", dsn), "unknown task 'nope'")
    assert_user_error(
        cli(
            capsys,
            "enqueue",
            "noop",
            "--dsn",
            dsn,
            "--app",
            "tests.apps.basic:app",
            "--args",
            "[1, 2, 3]",
        ),
        "noop",
    )
    assert_user_error(
        cli(capsys, "worker", "--dsn", dsn, "--app", "no.such.module:app"), "cannot import"
    )
    assert_user_error(
        cli(capsys, "worker", "--dsn", dsn, "--app", "tests.apps.basic:nope"), "not a pgqueue.App"
    )
    assert_user_error(cli(capsys, "worker", "--dsn", dsn, "--app", "nocolon"), "MODULE:ATTR")
    assert_user_error(cli(capsys, "runs", "list", "--dsn", dsn, "--bogus"), "--bogus")
    assert_user_error(cli(capsys, "runs", "list", "--dsn", dsn, "--state", "happy"), "happy")


def test_a_bad_pooler_is_one_line(capsys: Any, dsn: str) -> None:
    """--pooler and PGQUEUE_POOLER take none, session or transaction; anything else is
    refused before the worker starts, naming the value and the accepted ones."""
    worker = ["worker", "--dsn", dsn, "--app", "tests.apps.basic:app", "--burst"]
    assert_user_error(
        cli(capsys, *worker, "--pooler", "pgbouncer"),
        "--pooler",
        "'pgbouncer' is not one of 'none', 'session', 'transaction'",
    )
    code, _, err = cli(capsys, *worker, "--pooler", "TRANSACTION")
    assert code == 0, err

    # The App reads PGQUEUE_POOLER when the app module is imported: a process of its own.
    def run(pooler: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PGQUEUE_POOLER": pooler, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "pgqueue", *worker]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    refused = run("statement")
    assert_user_error(
        (refused.returncode, refused.stdout, refused.stderr),
        "PGQUEUE_POOLER must be one of none, session, transaction, not 'statement'",
    )
    accepted = run("session")
    assert accepted.returncode == 0, accepted.stderr


def test_migrate_sql_prints_ddl(capsys: Any) -> None:
    code, out, _ = cli(capsys, "migrate", "--sql")
    assert code == 0
    assert "CREATE SCHEMA IF NOT EXISTS pgqueue" in out
    assert "CREATE TABLE pgqueue.runs" in out
    assert "pgqueue.alembic_version" in out


def test_migrate_is_idempotent(capsys: Any, dsn: str) -> None:
    for _ in range(2):
        code, out, _ = cli(capsys, "migrate", "--dsn", dsn)
        assert code == 0 and "revision" in out


@pytest.mark.slow
def test_installed_wheel_carries_migrations_and_sql(tmp_path: Any, dsn: str) -> None:
    """`pip install .` (a real wheel), then `pgqueue migrate` from another directory."""
    wheel_dir, target = tmp_path / "wheel", tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheel_dir), str(ROOT)],
        check=True,
    )
    wheels = list(wheel_dir.glob("pgqueue_jobs-*.whl"))
    assert len(wheels) == 1
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheels[0]),
        ],
        check=True,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    where = subprocess.run(
        [sys.executable, "-c", "import pgqueue, pgqueue.sql; print(pgqueue.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(target)), where.stdout
    done = subprocess.run(
        [sys.executable, "-m", "pgqueue", "migrate", "--dsn", dsn],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    sql = subprocess.run(
        [sys.executable, "-m", "pgqueue", "migrate", "--sql"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "CREATE TABLE pgqueue.runs" in sql.stdout


def test_emit_event(capsys: Any, dsn: str) -> None:
    code, out, _ = cli(
        capsys, "emit", "order.paid", "--key", "o-1", "--payload", '{"a": 1}', "--dsn", dsn
    )
    assert code == 0 and out.startswith("event ")
    assert_user_error(
        cli(capsys, "emit", "x", "--payload", "{nope", "--dsn", dsn), "--payload is not valid JSON"
    )


DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (["--priority", "40000"], "priority must be between -32768 and 32767"),
        (["--priority", "-40000"], "priority must be between"),
        (["--max-attempts", "10000000000"], "max_attempts must be between 1 and 2147483647"),
        (["--delay", "nan"], "delay must be 0 or more seconds"),
        (["--delay", "inf"], "delay must be 0 or more seconds"),
        (["--delay", "1e308"], "delay must be 0 or more seconds"),
        (["--args", '["\\ud800"]'], "lone surrogate"),
        (["--kwargs", '{"n": "\\udfff"}'], "lone surrogate"),
        (["--args", DEEP], "--args nests too deeply"),
        (["--kwargs", '{"a":' * 3000 + "1" + "}" * 3000], "--kwargs nests too deeply"),
        (["--args", "[" + "[" * 300 + "]" * 300 + "]"], "nested deeper than 256 levels"),
        (["--kwargs", '{"n":' + "[" * 300 + "]" * 300 + "}"], "nested deeper than 256 levels"),
        (["--queue", "q" * 201], "queue name must be 1 to 200 characters"),
        (["--idempotency-key", "k" * 600], "idempotency key is 600 bytes"),
    ],
)
def test_enqueue_refuses_bad_values_in_one_line(
    capsys: Any, dsn: str, app: pgqueue.App, options: list[str], fragment: str
) -> None:
    result = cli(capsys, "enqueue", "noop", "--dsn", dsn, "--app", "tests.apps.basic:app", *options)
    assert_user_error(result, fragment)
    assert app.list_runs() == []


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["emit", "e", "--key", "k" * 600], "event key is 600 bytes"),
        (["emit", "e", "--payload", DEEP], "--payload nests too deeply"),
        (["emit", "e", "--payload", "[" * 300 + "]" * 300], "nested deeper than 256"),
        (["emit", "e", "--payload", '"\\ud800"'], "lone surrogate"),
        (["emit", "e" * 201], "event name must be 1 to 200"),
        (["queues", "set", "q", "--concurrency", "10000000000"], "10000000000 is not in the range"),
        (["queues", "set", "q" * 201, "--concurrency", "1"], "queue name must be 1 to 200"),
    ],
)
def test_other_commands_refuse_bad_values_in_one_line(
    capsys: Any, dsn: str, args: list[str], fragment: str
) -> None:
    assert_user_error(cli(capsys, *args, "--dsn", dsn), fragment)


def test_runs_show_lists_the_steps_and_what_they_waited_for(
    capsys: Any, dsn: str, app: pgqueue.App
) -> None:
    run_id = app.enqueue_by_name("noop", [1]).id
    with app.connection() as conn:
        conn.execute(
            "INSERT INTO pgqueue.steps (run_id, name, state, attempt, output, waited, created_at,"
            " started_at, finished_at) VALUES"
            " (%(id)s, 'load', 'succeeded', 1, '2', NULL, now() - interval '9 s',"
            "  now() - interval '9 s', now() - interval '8 s'),"
            ' (%(id)s, \'paid\', \'waiting\', 2, NULL, \'{"event": "order.paid", "key": "42",'
            "  \"timeout\": 3600}', now() - interval '5 s', NULL, NULL)",
            {"id": run_id},
        )
    code, out, _ = cli(capsys, "runs", "show", str(run_id), "--dsn", dsn)
    assert code == 0
    assert "  load [succeeded] attempt 1 started " in out and " took 1.0 s" in out
    assert "  paid [waiting] attempt 2: event order.paid key 42: waiting for 5." in out
    assert "(timeout 60 min)" in out


def test_enqueue_with_a_unique_key(capsys: Any, dsn: str, app: pgqueue.App) -> None:
    base = ["enqueue", "noop", "--dsn", dsn, "--app", "tests.apps.basic:app", "--json"]
    first = cli(capsys, *base, "--unique-key", "reindex:1", "--unique-while", "active")
    again = cli(capsys, *base, "--unique-key", "reindex:1", "--unique-while", "active")
    assert first[0] == again[0] == 0
    assert json.loads(first[1])["created"] and not json.loads(again[1])["created"]
    assert json.loads(first[1])["id"] == json.loads(again[1])["id"]
    assert_user_error(cli(capsys, *base, "--unique-for", "5"), "needs a unique_key")


def test_enqueue_after_runs_by_id(capsys: Any, dsn: str, app: pgqueue.App) -> None:
    base = ["enqueue", "noop", "--dsn", dsn, "--app", "tests.apps.basic:app", "--json"]
    first = app.enqueue_by_name("noop", [1])
    second = app.enqueue_by_name("noop", [2])
    code, out, _ = cli(capsys, *base, "--after", str(first.id), "--after", str(second.id))
    assert code == 0
    waiting = app.get_run(json.loads(out)["id"])
    assert waiting.state == "waiting"
    assert waiting.after == [first.id, second.id] and waiting.on_dependency_failure == "cancel"
    code, out, _ = cli(capsys, *base, "--after", str(first.id), "--on-dependency-failure", "run")
    assert code == 0
    assert app.get_run(json.loads(out)["id"]).on_dependency_failure == "run"
    app.cancel(first.id)  # "run": the dependent is released, whatever its dependency ended with
    assert app.get_run(json.loads(out)["id"]).state == "queued"


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (["--after", "987654"], "run 987654 named in after= does not exist"),
        (["--after", "x"], "'x' is not a valid integer"),
        (["--after", "0"], "0 is not in the range x>=1"),
        (["--after", "1", "--on-dependency-failure", "maybe"], "'maybe' is not one of"),
        (["--on-dependency-failure", "run"], "on_dependency_failure needs after="),
    ],
)
def test_enqueue_after_refuses_bad_ids_in_one_line(
    capsys: Any, dsn: str, app: pgqueue.App, options: list[str], fragment: str
) -> None:
    result = cli(capsys, "enqueue", "noop", "--dsn", dsn, "--app", "tests.apps.basic:app", *options)
    assert_user_error(result, fragment)
    assert app.list_runs() == []


def test_enqueue_on_duplicate_cancel_running(capsys: Any, dsn: str, app: pgqueue.App) -> None:
    base = ["enqueue", "noop", "--dsn", dsn, "--app", "tests.apps.basic:app", "--json"]
    replace = ["--unique-key", "sync:1", "--on-duplicate", "cancel_running"]
    first = json.loads(cli(capsys, *base, *replace)[1])["id"]
    second = json.loads(cli(capsys, *base, *replace)[1])["id"]
    assert app.get_run(first).cancel_reason == f"replaced by #{second}"
    assert app.get_run(second).state == "queued"
    assert_user_error(
        cli(capsys, *base, *replace, "--unique-while", "queued"), "needs unique_while='active'"
    )
