"""The operations commands: `pgqueue prune`, `pgqueue worker --keep-*` and retention
options, `pgqueue stats` (the views and the worker's pruning: tests/ops/test_operations.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from tests.cli.helpers import assert_user_error, cli
from tests.helpers import ROOT, InProcessWorker, WorkerProcess, scalar, wait_until
from tests.ops.test_operations import finished, insert_run


def test_prune_cli_deletes_in_batches_with_cascades(
    capsys: Any, app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    old = [finished(conn, "succeeded", timedelta(days=8)) for _ in range(3)]
    recent = finished(conn, "succeeded", timedelta(days=2))
    old_failed = finished(conn, "failed", timedelta(days=8))
    live = insert_run(conn)
    for run_id in (old[0], recent):
        conn.execute(
            "INSERT INTO pgqueue.steps (run_id, name, state, attempt)"
            " VALUES (%s, 's', 'succeeded', 1)",
            (run_id,),
        )
        conn.execute(
            "INSERT INTO pgqueue.run_errors (run_id, attempt, kind, message)"
            " VALUES (%s, 1, 'error', 'x')",
            (run_id,),
        )
    conn.execute(
        "INSERT INTO pgqueue.events (event, created_at) VALUES ('old', now() - interval '9 days'),"
        " ('new', now())"
    )
    code, out, _ = cli(
        capsys, "prune", "--older-than", "7d", "--state", "failed", "--dsn", app.dsn, "--json"
    )
    assert code == 0 and json.loads(out) == {"failed": 1, "batches": 0}
    code, out, _ = cli(capsys, "prune", "--older-than", "7d", "--events", "--dsn", app.dsn)
    assert (
        code == 0
        and out.strip() == "deleted 3 succeeded, 0 failed, 0 canceled, 1 events, 0 batches"
    )
    remaining = {r[0] for r in conn.execute("SELECT id FROM pgqueue.runs")}
    assert remaining == {recent, live}
    assert old_failed not in remaining
    assert scalar(app.dsn, "SELECT count(*) FROM pgqueue.steps") == 1
    assert scalar(app.dsn, "SELECT count(*) FROM pgqueue.run_errors") == 1
    assert scalar(app.dsn, "SELECT array_agg(event) FROM pgqueue.events") == ["new"]
    # Batches: 2,500 old runs go in three statements of at most 1,000.
    conn.execute(
        "INSERT INTO pgqueue.runs (task, state, finished_at)"
        " SELECT 't', 'canceled', now() - interval '40 days' FROM generate_series(1, 2500)"
    )
    assert app.prune(timedelta(days=30)) == {
        "succeeded": 0,
        "failed": 0,
        "canceled": 2500,
        "batches": 0,
    }
    # --audit: the audit log's entries recorded before then (the prunes above recorded
    # theirs just now: kept), and the prune records itself.
    conn.execute(
        "INSERT INTO pgqueue.audit (at, actor, action) VALUES (now() - interval '8 days',"
        " 'cli', 'cancel'), (now() - interval '6 days', 'cli', 'retry')"
    )
    code, out, _ = cli(
        capsys,
        "prune",
        "--older-than",
        "7d",
        "--state",
        "failed",
        "--audit",
        "--dsn",
        app.dsn,
        "--json",
    )
    assert code == 0 and json.loads(out) == {"failed": 0, "audit": 1, "batches": 0}
    actions = [r[0] for r in conn.execute("SELECT action FROM pgqueue.audit ORDER BY id")]
    assert actions == ["prune", "prune", "retry", "prune"]
    assert app.prune(timedelta(days=5), states=[], audit=True) == {"audit": 1}
    assert_user_error(cli(capsys, "prune", "--older-than", "soon", "--dsn", app.dsn), "duration")


def test_worker_cli_keep_flags_prune_old_history(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """`pgqueue worker --keep-*`: a worker process started from the CLI prunes with them."""
    gone = {
        finished(conn, "succeeded", timedelta(hours=2)),
        finished(conn, "failed", timedelta(days=2)),
    }
    keep = {
        finished(conn, "succeeded", timedelta(minutes=10)),
        finished(conn, "failed", timedelta(hours=20)),
        finished(conn, "canceled", timedelta(days=400)),  # --keep-canceled forever
    }
    conn.execute(
        "INSERT INTO pgqueue.events (event, created_at) VALUES ('old', now() - interval '2 hours'),"
        " ('new', now() - interval '30 minutes')"
    )
    with WorkerProcess(
        app.dsn,
        "tests.apps.basic:app",
        "--queues",
        "none",
        "--keep-succeeded",
        "1h",
        "--keep-failed",
        "1d",
        "--keep-canceled",
        "forever",
        "--keep-events",
        "1h",
    ) as worker:
        worker.wait_ready()

        def pruned() -> bool:
            ids = {r[0] for r in conn.execute("SELECT id FROM pgqueue.runs")}
            events = scalar(app.dsn, "SELECT array_agg(event) FROM pgqueue.events")
            return not ids & gone and events == ["new"]

        wait_until(pruned, message="the CLI worker's pruner to delete the old runs and events")
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 0, worker.output()
    assert {r[0] for r in conn.execute("SELECT id FROM pgqueue.runs")} == keep


def test_worker_cli_retention_options(
    capsys: Any, app: pgqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The --keep-* and --no-prune flags become Worker(retention=...), from `pgqueue
    worker` and from the framework integrations (the same click command)."""
    from pgqueue.contrib import _cli

    given: list[Any] = []

    class Stub:
        def run(self, burst: bool = False) -> None:
            pass

    def fake_worker(self: pgqueue.App, **options: Any) -> Stub:
        given.append(options["retention"])
        return Stub()

    monkeypatch.setattr(pgqueue.App, "worker", fake_worker)
    base = ["worker", "--dsn", app.dsn, "--app", "tests.apps.basic:app"]
    assert cli(capsys, *base)[0] == 0
    assert given.pop() == pgqueue.Retention()
    assert cli(capsys, *base, "--keep-succeeded", "1d12h", "--keep-failed", "forever")[0] == 0
    assert given.pop() == pgqueue.Retention(succeeded=timedelta(hours=36), failed=None)
    assert cli(capsys, *base, "--keep-canceled", "90", "--keep-events", "2w")[0] == 0
    assert given.pop() == pgqueue.Retention(canceled=timedelta(seconds=90), events=timedelta(14))
    assert cli(capsys, *base, "--keep-audit", "365d")[0] == 0
    assert given.pop() == pgqueue.Retention(audit=timedelta(days=365))
    assert cli(capsys, *base, "--keep-audit", "forever")[0] == 0
    assert given.pop() == pgqueue.Retention(audit=None)
    assert cli(capsys, *base, "--no-prune")[0] == 0
    assert given.pop() is None
    _cli.run(
        ["worker", "--keep-succeeded", "12h"], app=app, dsn=app.dsn, prog_name="manage.py pgqueue"
    )
    assert given.pop() == pgqueue.Retention(succeeded=timedelta(hours=12))


def test_worker_cli_bad_retention_is_a_user_error(
    capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checked before the database is: no DSN is needed to report them.
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    base = ["worker", "--app", "tests.apps.basic:app"]
    assert_user_error(
        cli(capsys, *base, "--keep-succeeded", "7 days"),
        "Invalid value for '--keep-succeeded'",
        "invalid duration '7 days'",
    )
    assert_user_error(cli(capsys, *base, "--keep-failed", "-1h"), "--keep-failed")
    assert_user_error(cli(capsys, *base, "--keep-events", "-5"), "negative")
    assert_user_error(
        cli(capsys, *base, "--no-prune", "--keep-failed", "1d"), "--no-prune contradicts"
    )
    assert_user_error(cli(capsys, *base, "--keep-canceled"), "requires an argument")


def test_stats_prints_once_and_as_json(capsys: Any, app: pgqueue.App) -> None:
    @app.task(name="ops.ok", queue="mail")
    def ok(n: int = 0) -> int:
        return n

    for n in range(3):
        ok.enqueue(n)
    with InProcessWorker(app):
        wait_until(
            lambda: (
                scalar(app.dsn, "SELECT count(*) FROM pgqueue.runs WHERE finished_at IS NOT NULL")
                == 3
            )
        )
        ok.options(delay=3600).enqueue(9)
        code, out, _ = cli(capsys, "stats", "--dsn", app.dsn)
        assert code == 0
        assert "1 workers live" in out and "0/10 slots busy" in out
        header, mail = [line for line in out.splitlines() if "QUEUE" in line or "mail" in line][:2]
        assert header.split()[:5] == ["QUEUE", "QUEUED", "SCHEDULED", "RUNNING", "WAITING"]
        assert mail.split()[:8] == ["mail", "0", "1", "0", "0", "-", "3", "3"]
        code, out, _ = cli(capsys, "stats", "--dsn", app.dsn, "--json")
    snap = json.loads(out)
    [mail_stats] = [q for q in snap["queues"] if q["queue"] == "mail"]
    assert mail_stats["finished_last_minute"] == 3 and len(snap["workers"]) == 1


def test_stats_watch_redraws_until_ctrl_c(dsn: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgqueue", "stats", "--watch", "--interval", "0.2", "--dsn", dsn],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        screens = 0
        while screens < 3:  # readline blocks until the next screen is drawn
            line = proc.stdout.readline()
            assert line, "stats --watch exited early"
            screens += "workers live" in line
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
