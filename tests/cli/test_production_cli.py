"""`pgqueue migrate --check | --dry-run`, `pgqueue uninstall` and `pgqueue health`."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import migrate
from tests.cli.helpers import assert_user_error, cli
from tests.helpers import InProcessWorker, empty_database, scalar


@pytest.fixture
def scratch(server_params: dict[str, Any]) -> Iterator[str]:
    """An empty database of its own (dropped after the test)."""
    with empty_database(server_params, "pgqueue_scratch") as dsn:
        yield dsn


# A worker registered on another host (as pgqueue.worker.registration does).
KILLED_WORKER = (
    "INSERT INTO pgqueue.workers (id, host, pid, queues, tasks, concurrency, version)"
    " VALUES (gen_random_uuid(), 'some-other-host', 1, '{default}', '{}', 1, 'x')"
)


def migrate_to(dsn: str, revision: str) -> None:
    from alembic import command

    with migrate._config(dsn) as cfg:
        cfg.attributes["lock_timeout"] = migrate.LOCK_TIMEOUT
        command.upgrade(cfg, revision)


def test_migrate_check_at_head_exits_0(capsys: Any, dsn: str) -> None:
    code, out, _ = cli(capsys, "migrate", "--check", "--dsn", dsn)
    assert code == 0
    assert out == f"the pgqueue schema is current (revision {migrate.head()})\n"


def test_migrate_check_with_pending_migrations_exits_1_and_names_them(
    capsys: Any, scratch: str
) -> None:
    previous = migrate.revisions()[-2]
    migrate_to(scratch, previous)
    code, out, _ = cli(capsys, "migrate", "--check", "--dsn", scratch)
    assert code == 1
    assert out.count("\n") == 1
    assert f"at revision {previous}: 1 migration pending ({migrate.head()})" in out
    # --check changed nothing
    assert scalar(scratch, "SELECT version_num FROM pgqueue.alembic_version") == previous


def test_migrate_check_without_schema_exits_1(capsys: Any, scratch: str) -> None:
    code, out, _ = cli(capsys, "migrate", "--check", "--dsn", scratch)
    assert code == 1 and out.startswith("no pgqueue schema: ")


def test_migrate_dry_run_prints_only_the_pending_sql_and_runs_nothing(
    capsys: Any, scratch: str
) -> None:
    previous = migrate.revisions()[-3]
    migrate_to(scratch, previous)
    code, out, _ = cli(capsys, "migrate", "--dry-run", "--dsn", scratch)
    assert code == 0
    assert "CREATE TABLE pgqueue.runs" not in out  # not the whole schema
    assert f"UPDATE pgqueue.alembic_version SET version_num='{migrate.head()}'" in out
    assert scalar(scratch, "SELECT version_num FROM pgqueue.alembic_version") == previous
    code, out, _ = cli(capsys, "migrate", "--dsn", scratch)
    code, out, _ = cli(capsys, "migrate", "--dry-run", "--dsn", scratch)
    assert code == 0 and out.startswith("-- nothing to run: the pgqueue schema is current")


def test_migrate_check_and_dry_run_are_exclusive(capsys: Any, dsn: str) -> None:
    assert_user_error(
        cli(capsys, "migrate", "--check", "--dry-run", "--dsn", dsn), "at most one of"
    )


def test_uninstall_asks_and_drops_the_schema(capsys: Any, monkeypatch: Any, scratch: str) -> None:
    migrate.upgrade(scratch)
    app = pgqueue.App(scratch)
    try:
        app.enqueue_by_name("anything", [1])
    finally:
        app.close()
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("n\n"))
    code, _, err = cli(capsys, "uninstall", "--dsn", scratch)
    assert code == 1 and "Drop schema pgqueue (" in err and "1 runs)" in err
    assert scalar(scratch, "SELECT count(*) FROM pgqueue.runs") == 1

    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("y\n"))
    code, out, _ = cli(capsys, "uninstall", "--dsn", scratch)
    assert code == 0 and out.startswith("dropped schema pgqueue (") and "1 runs)" in out
    assert scalar(scratch, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 0

    code, out, _ = cli(capsys, "uninstall", "--dsn", scratch, "--yes")
    assert code == 0 and out == "nothing to drop: this database has no pgqueue schema\n"


def test_uninstall_refuses_while_workers_are_live_unless_forced(capsys: Any, scratch: str) -> None:
    migrate.upgrade(scratch)
    app = pgqueue.App(scratch)
    try:
        with InProcessWorker(app, queues=["default"]):
            assert_user_error(
                cli(capsys, "uninstall", "--dsn", scratch, "--yes"),
                "1 worker is live (",
                "--force",
            )
            assert scalar(scratch, "SELECT count(*) FROM pgqueue.runs") == 0
    finally:
        app.close()
    # a worker killed a moment ago still counts as live: --force drops the schema anyway
    with psycopg.connect(scratch, autocommit=True) as conn:
        conn.execute(KILLED_WORKER)
    assert_user_error(cli(capsys, "uninstall", "--dsn", scratch, "--yes"), "1 worker is live")
    code, out, _ = cli(capsys, "uninstall", "--dsn", scratch, "--yes", "--force")
    assert code == 0 and out.startswith("dropped schema pgqueue")


def test_health_without_workers_is_unhealthy(capsys: Any, dsn: str) -> None:
    code, out, _ = cli(capsys, "health", "--dsn", dsn)
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("ok   database: reachable (PostgreSQL ")
    assert lines[1].startswith("ok   schema: the pgqueue schema is current")
    assert lines[2].startswith("FAIL workers: 0 workers on ")


def test_health_with_a_worker_on_this_host_is_healthy(
    capsys: Any, dsn: str, app: pgqueue.App
) -> None:
    with InProcessWorker(app, queues=["default"]):
        code, out, _ = cli(capsys, "health", "--dsn", dsn, "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["healthy"] is True
    assert [c["name"] for c in report["checks"]] == ["database", "schema", "workers"]
    assert report["checks"][2]["detail"].startswith("1 worker on ")


def test_health_counts_only_this_hosts_workers_unless_any_host(capsys: Any, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(KILLED_WORKER)
    code, out, _ = cli(capsys, "health", "--dsn", dsn)
    assert code == 1 and "FAIL workers: 0 workers on " in out
    code, out, _ = cli(capsys, "health", "--dsn", dsn, "--any-host")
    assert code == 0 and "ok   workers: 1 worker on any host" in out
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgqueue.workers SET heartbeat_at = now() - interval '5 minutes'")
    code, out, _ = cli(capsys, "health", "--dsn", dsn, "--any-host")
    assert code == 1 and "FAIL workers: 0 workers on any host" in out


def test_health_of_an_unreachable_database(capsys: Any) -> None:
    code, out, _ = cli(
        capsys, "health", "--dsn", "postgresql://u:secret@127.0.0.1:1/x?connect_timeout=2", "--json"
    )
    assert code == 1
    report = json.loads(out)
    assert report["healthy"] is False
    assert report["checks"][0]["detail"].startswith("unreachable: ")
    assert "secret" not in out


def test_health_of_a_schema_behind(capsys: Any, scratch: str) -> None:
    migrate_to(scratch, migrate.revisions()[-2])
    code, out, _ = cli(capsys, "health", "--dsn", scratch, "--any-host")
    assert code == 1
    assert "FAIL schema: the pgqueue schema is at revision" in out


def test_dashboard_on_a_busy_port_is_one_line_and_exit_2(capsys: Any, dsn: str) -> None:
    pytest.importorskip("uvicorn")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli(capsys, "dashboard", "--dsn", dsn, "--port", str(port))
    assert_user_error(
        result,
        f"cannot serve the dashboard on 127.0.0.1:{port}: Address already in use",
        "pick another --port",
    )
    assert "http://" not in result[2]  # no URL printed for a server that never ran


def test_health_never_prints_a_password(capsys: Any, monkeypatch: Any) -> None:
    from tests.cli.test_cli_errors import BAD_DSNS, SECRET

    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    for bad_dsn in BAD_DSNS:
        code, out, err = cli(capsys, "health", "--dsn", bad_dsn)
        assert code in (1, 2) and "Traceback" not in err, (bad_dsn, out, err)
        assert SECRET not in out + err and "s3cret%70w" not in out + err, (out, err)
