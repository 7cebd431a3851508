"""Least privilege: real roles on the test server, given what `pgqueue grants ROLE --as
KIND --apply` grants (run by the schema's owner) and nothing else."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgqueue
from pgqueue.db import grants
from pgqueue.db import sql as _sql
from tests.apps.basic import EFFECTS_DDL
from tests.cli.helpers import cli
from tests.helpers import ROOT, WorkerProcess, scalar, wait_until

_serial = itertools.count()
MakeRole = Callable[..., tuple[str, str]]


def as_role(dsn: str, role: str) -> str:
    params = conninfo_to_dict(dsn) | {"user": role}
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


@pytest.fixture
def make_role(dsn: str, capsys: pytest.CaptureFixture[str]) -> Iterator[MakeRole]:
    """make_role(kind) -> (role, its DSN): a fresh LOGIN role given the `kind` grants by
    the owner with `pgqueue grants --apply`. Dropped (with its privileges) at the end."""
    made: list[str] = []

    def make(kind: str | None) -> tuple[str, str]:
        role = f"pgqueue_t{os.getpid()}_{next(_serial)}"
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        made.append(role)
        if kind is not None:
            code, _, err = cli(capsys, "grants", role, "--as", kind, "--apply", "--dsn", dsn)
            assert code == 0, err
        return role, as_role(dsn, role)

    yield make
    with psycopg.connect(dsn, autocommit=True) as admin:
        for role in made:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def assert_refused(result: tuple[int, str, str], role: str) -> None:
    code, _, err = result
    assert code == 2, result
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert f"pgqueue grants {role}" in err, err


def test_printed_grants_are_quoted_and_cover_every_table(dsn: str, capsys: Any) -> None:
    code, out, _ = cli(capsys, "grants", 'odd"role', "--as", "reader", "--dsn", dsn)
    assert code == 0
    lines = out.splitlines()
    assert 'GRANT USAGE ON SCHEMA "pgqueue" TO "odd""role";' in lines
    tables = scalar(
        dsn,
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'pgqueue'",
    )
    assert sum(line.startswith("GRANT SELECT ON TABLE") for line in lines) >= tables
    assert any(line.startswith("ALTER DEFAULT PRIVILEGES FOR ROLE") for line in lines)
    assert not any("INSERT" in line or "EXECUTE" in line for line in lines)


def statement_needs(text: str) -> set[tuple[str, str]]:
    """(table, privilege) pairs that a statement's text plainly needs: its INSERT, UPDATE
    and DELETE targets, the target of an ON CONFLICT DO UPDATE, and (over-approximated)
    UPDATE on every table read by a statement that locks rows."""
    needs = {(t, "INSERT") for t in re.findall(r"INSERT INTO pgqueue\.(\w+)", text)}
    needs |= {(t, "UPDATE") for t in re.findall(r"\bUPDATE pgqueue\.(\w+)", text)}
    needs |= {(t, "DELETE") for t in re.findall(r"DELETE FROM pgqueue\.(\w+)", text)}
    if "DO UPDATE" in text:
        needs |= {(t, "UPDATE") for t, p in needs if p == "INSERT"}
    if re.search(r"FOR (NO KEY )?(UPDATE|SHARE)", text):
        needs |= {(t, "UPDATE") for t in re.findall(r"FROM pgqueue\.(\w+)", text)}
    return needs


def test_the_worker_grants_cover_every_statement_pgqueue_runs() -> None:
    """Every statement in sql/ and in the schema's functions (migrations) against the
    privileges `--as worker` grants on each table."""
    texts = [_sql.query(name) for name in _sql.names()]
    texts += [p.read_text() for p in sorted((ROOT / "migrations" / "versions").glob("*.sql"))]
    missing = set()
    for text in texts:
        for statement in text.split(";"):
            for table, privilege in statement_needs(statement):
                obj = grants.SchemaObject("table", table, "", False, "owner", ())
                if privilege not in grants.needed(obj, "worker"):
                    missing.add((table, privilege))
    assert not missing


def test_worker_role_runs_tasks_and_workflows(
    dsn: str, conn: psycopg.Connection[Any], make_role: MakeRole, capsys: Any
) -> None:
    role, role_dsn = make_role("worker")
    conn.execute(EFFECTS_DDL)  # the test tasks' own table: the application grants it
    conn.execute(sql.SQL("GRANT SELECT, INSERT ON effects TO {}").format(sql.Identifier(role)))
    producer = pgqueue.App(dsn)
    try:
        plain = producer.enqueue_by_name("flows.noop", [])
        flow = producer.enqueue_by_name("flows.parent", [4])
        waiting = producer.enqueue_by_name("flows.waiter", ["k1", 30])
        with WorkerProcess(role_dsn, "tests.apps.flows:app").wait_ready():
            assert plain.wait(timeout=20) == "noop"
            assert flow.wait(timeout=30) == 41
            wait_until(lambda: producer.get_run(waiting.id).state == "waiting", 20)
            producer.emit_event("order.paid", key="k1", payload={"ok": True})
            assert waiting.wait(timeout=20) == {"ok": True}
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE state = 'failed'") == 0
        # The CLI's actions take the worker grants too.
        late = producer.enqueue_by_name("flows.noop", [], delay=3600).id
        for args in (
            ["runs", "cancel", str(late)],
            ["runs", "retry", str(late)],
            ["queues", "pause", "default"],
            ["queues", "resume", "default"],
            ["queues", "set", "default", "--concurrency", "5"],
            ["prune", "--older-than", "0s", "--events"],
        ):
            code, _, err = cli(capsys, *args, "--dsn", role_dsn)
            assert code == 0, (args, err)
        # pruned with their steps and errors (flow's first attempt failed)
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE id = %s", (flow.id,)) == 0
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.steps") == 0
    finally:
        producer.close()


def test_producer_role_enqueues_and_waits(dsn: str, make_role: MakeRole, capsys: Any) -> None:
    _, role_dsn = make_role("producer")
    producer = pgqueue.App(role_dsn)
    try:
        with WorkerProcess(dsn, "tests.apps.basic:app").wait_ready():
            assert producer.enqueue_by_name("noop", [5]).wait(timeout=20) == 5
            with psycopg.connect(role_dsn, autocommit=True) as c:
                row = c.execute("SELECT pgqueue.enqueue('noop', '[6]'::jsonb)").fetchone()
            assert row is not None
            assert pgqueue.RunHandle(int(row[0]), producer).wait(timeout=20) == 6
            assert producer.emit_event("some.event", key="k") > 0
            # dependencies: the enqueue trigger locks and flags them with the producer's
            # grants, and cancels a run whose dependency was canceled
            first = producer.enqueue_by_name("noop", [7], delay=3600)
            then = producer.enqueue_by_name("noop", [8], after=[first])
            assert producer.get_run(then.id).waiting_for == [first.id]
            owner = pgqueue.App(dsn)
            try:
                assert owner.cancel(first.id)
            finally:
                owner.close()
            assert producer.get_run(then.id).state == "canceled"
            late = producer.enqueue_by_name("noop", [9], after=[first])
            assert producer.get_run(late.id).cancel_reason == f"dependency #{first.id} was canceled"
            assert producer.enqueue_by_name("noop", [10], after=[row[0]]).wait(timeout=20) == 10
        code, _, err = cli(capsys, "runs", "list", "--dsn", role_dsn)
        assert code == 0, err
    finally:
        producer.close()


def test_reader_role_inspects_and_is_refused_actions_in_one_line(
    dsn: str, app: pgqueue.App, make_role: MakeRole, capsys: Any
) -> None:
    role, role_dsn = make_role("reader")
    run_id = app.enqueue_by_name("noop", [1]).id
    for args in (["runs", "list"], ["runs", "show", str(run_id)], ["queues"], ["workers"]):
        code, _, err = cli(capsys, *args, "--dsn", role_dsn)
        assert code == 0, (args, err)
    assert str(run_id) in cli(capsys, "runs", "list", "--dsn", role_dsn)[1]
    for args in (
        ["runs", "cancel", str(run_id)],
        ["queues", "pause", "default"],
        ["prune", "--older-than", "1d"],
    ):
        assert_refused(cli(capsys, *args, "--dsn", role_dsn), role)
    code, _, err = cli(capsys, "grants", role, "--as", "worker", "--apply", "--dsn", role_dsn)
    assert code == 2 and err.count("\n") == 1 and "as the owner of schema pgqueue" in err, err
    reader = pgqueue.App(role_dsn)
    try:
        with pytest.raises(pgqueue.PermissionDenied, match=f"role {role} lacks"):
            reader.cancel(run_id)
    finally:
        reader.close()
    assert app.get_run(run_id).state == "queued"


def test_a_worker_without_the_worker_grants_exits_2_with_one_line(
    dsn: str, make_role: MakeRole
) -> None:
    role, role_dsn = make_role("reader")
    with WorkerProcess(role_dsn, "tests.apps.basic:app") as worker:
        assert worker.wait(timeout=30) == 2
        lines = worker.output().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and f"pgqueue grants {role} --as worker" in lines[0]
    assert "lacks the worker's grants (USAGE on sequence pgqueue." in lines[0]


def test_grants_cover_objects_a_later_migration_adds(
    dsn: str, conn: psycopg.Connection[Any], make_role: MakeRole
) -> None:
    """ALTER DEFAULT PRIVILEGES: a table, sequence and function created afterwards by the
    schema's owner (as a migration would) are usable by the worker role at once."""
    _, role_dsn = make_role("worker")
    conn.execute("CREATE TABLE pgqueue.added_later (id bigserial PRIMARY KEY, note text)")
    conn.execute(
        "CREATE FUNCTION pgqueue.added_later_count() RETURNS bigint LANGUAGE sql"
        " AS 'SELECT count(*) FROM pgqueue.added_later'"
    )
    with psycopg.connect(role_dsn, autocommit=True) as c:
        c.execute("INSERT INTO pgqueue.added_later (note) VALUES ('x')")
        c.execute("UPDATE pgqueue.added_later SET note = 'y'")
        assert c.execute("SELECT pgqueue.added_later_count()").fetchone() == (1,)
        c.execute("DELETE FROM pgqueue.added_later")


def test_migrate_by_a_role_that_does_not_own_the_schema_is_one_line(
    conn: psycopg.Connection[Any], make_role: MakeRole, capsys: Any
) -> None:
    role, role_dsn = make_role("worker")
    # As if this release had one more migration than the schema holds: 0007 alters a table,
    # which only its owner may do (checked before anything else).
    conn.execute("UPDATE pgqueue.alembic_version SET version_num = '0006'")
    code, _, err = cli(capsys, "migrate", "--dsn", role_dsn)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"role {role} cannot migrate" in err and "--as owner" in err, err


def test_owner_role_migrates(dsn: str, make_role: MakeRole, capsys: Any) -> None:
    role, role_dsn = make_role("owner")
    code, _, err = cli(capsys, "migrate", "--dsn", role_dsn)
    assert code == 0, err
    assert (
        scalar(dsn, "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'pgqueue'")
        == role
    )
