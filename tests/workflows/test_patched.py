"""Versioned workflow code (docs/workflows.md, Versioning), with real worker processes:
a deploy in the middle of in-flight runs, the old and the new code as two worker
processes on one database, finishes every run with ctx.patched() deciding which code
each run takes; deprecate_patch() fails the runs that still need the old code."""

from __future__ import annotations

import signal
from typing import Any

import psycopg
import pytest

import pgqueue
from tests.apps.basic import EFFECTS_DDL
from tests.apps.patched import app as patched_app
from tests.helpers import WorkerProcess, wait_until

APP = "tests.apps.patched:app"


@pytest.fixture
def patched(dsn: str, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute(EFFECTS_DDL)
    patched_app.configure(dsn=dsn)
    return patched_app


def states(dsn: str, ids: list[int]) -> dict[str, int]:
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT state, count(*) FROM pgqueue.runs WHERE id = ANY(%s) GROUP BY state", (ids,)
        ).fetchall()
    return dict(rows)


def tags(dsn: str) -> dict[int, list[str]]:
    with psycopg.connect(dsn) as c:
        rows = c.execute("SELECT run_id, tag FROM effects ORDER BY id").fetchall()
    out: dict[int, list[str]] = {}
    for run_id, tag in rows:
        out.setdefault(run_id, []).append(tag)
    return out


def go(app: pgqueue.App, ids: list[int]) -> None:
    for run_id in ids:
        app.emit_event("patched.go", key=str(run_id))


def test_a_deploy_in_the_middle_of_100_runs_finishes_each_on_its_code(
    dsn: str, patched: pgqueue.App
) -> None:
    from tests.apps.patched import checkout

    old = [checkout.enqueue(i).id for i in range(100)]
    with WorkerProcess(dsn, APP, env={"PATCHED_CODE": "v1"}).wait_ready():
        wait_until(lambda: states(dsn, old) == {"waiting": 100}, timeout=60, message="v1 waits")
    # the deploy: v2 workers from here on; 20 runs enqueued now start on v2
    new = [checkout.enqueue(1000 + i).id for i in range(20)]
    with WorkerProcess(dsn, APP, env={"PATCHED_CODE": "v2"}).wait_ready():
        wait_until(lambda: states(dsn, new) == {"waiting": 20}, timeout=60, message="v2 waits")
        go(patched, old + new)
        wait_until(
            lambda: states(dsn, old + new) == {"succeeded": 120}, timeout=90, message="all done"
        )
    done = {r.id: r for r in (patched.get_run(i) for i in old + new)}
    effects = tags(dsn)
    for i, run_id in enumerate(old):
        # went past the receipt's point on v1: no receipt; had not reached the bonus's
        assert done[run_id].result == {"receipt": 0, "a": i, "bonus": 10, "b": 1}
        assert effects[run_id] == ["a", "bonus", "b"]
    for i, run_id in enumerate(new):
        assert done[run_id].result == {"receipt": 100, "a": 1000 + i, "bonus": 10, "b": 1}
        assert effects[run_id] == ["receipt", "a", "bonus", "b"]
    # each run's answers are recorded, and take no position among its operations
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT name, output, position FROM pgqueue.steps WHERE run_id = %s"
            " AND name LIKE 'pgqueue.patch:%%' ORDER BY name",
            (old[0],),
        ).fetchall()
    assert rows == [("pgqueue.patch:bonus", True, None), ("pgqueue.patch:receipt", False, None)]


def test_deprecating_a_patch_fails_the_runs_still_on_the_old_code(
    dsn: str, patched: pgqueue.App
) -> None:
    from tests.apps.patched import checkout

    old = checkout.enqueue(1).id
    with WorkerProcess(dsn, APP, env={"PATCHED_CODE": "v1"}).wait_ready():
        wait_until(lambda: states(dsn, [old]) == {"waiting": 1}, message="v1 waits")
    with WorkerProcess(dsn, APP, env={"PATCHED_CODE": "v2"}).wait_ready():
        go(patched, [old])  # v2 records the old run's answer: False
        wait_until(lambda: states(dsn, [old]) == {"succeeded": 1}, message="v2 finishes it")
    new = checkout.enqueue(2).id
    with WorkerProcess(dsn, APP, env={"PATCHED_CODE": "v2"}).wait_ready():
        wait_until(lambda: states(dsn, [new]) == {"waiting": 1}, message="v2 waits")
    patched.retry(old)  # replayed from the top, on v3
    with WorkerProcess(dsn, APP, env={"PATCHED_CODE": "v3"}).wait_ready():
        go(patched, [new])
        wait_until(lambda: states(dsn, [old, new]) == {"failed": 1, "succeeded": 1}, message="v3")
    failed = patched.get_run(old)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error.startswith(
        f"NonDeterministic: run {old} started on the code before patch 'receipt'"
    )
    assert patched.get_run(new).result == {"receipt": 100, "a": 2, "bonus": 10, "b": 1}


def test_a_patch_id_is_checked() -> None:
    from pgqueue.workflows.durable import patch_step

    with pytest.raises(pgqueue.errors.UserError, match="patch id"):
        patch_step("")
    with pytest.raises(pgqueue.errors.UserError, match="patch id"):
        patch_step("a#2")
    assert patch_step("send-receipt") == "pgqueue.patch:send-receipt"


VERSIONED = "tests.apps.versioned:app"


def test_a_worker_leaves_a_run_of_another_version_to_a_worker_that_has_it(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    from tests.apps.versioned import app as versioned_app
    from tests.apps.versioned import async_ship, ship

    conn.execute(EFFECTS_DDL)
    versioned_app.configure(dsn=dsn)
    old = ship.enqueue(1).id
    with WorkerProcess(dsn, VERSIONED, env={"WORKFLOW_VERSION": "v1"}).wait_ready():
        wait_until(lambda: states(dsn, [old]) == {"waiting": 1}, message="v1 waits")
    recorded = "SELECT output FROM pgqueue.steps WHERE run_id = %s AND name = 'pgqueue.version'"
    assert conn.execute(recorded, (old,)).fetchone() == ("v1",)
    attempts = versioned_app.get_run(old).attempt  # a wait gives its attempt back
    new = ship.enqueue(2).id
    fresh = async_ship.enqueue(3).id
    with WorkerProcess(dsn, VERSIONED, env={"WORKFLOW_VERSION": "v2"}).wait_ready() as v2:
        wait_until(lambda: states(dsn, [new]) == {"waiting": 1}, message="v2 waits")
        versioned_app.emit_event("versioned.go", key="1")
        versioned_app.emit_event("versioned.go", key="2")
        wait_until(lambda: states(dsn, [new, fresh]) == {"succeeded": 2}, message="v2's runs")
        # the v1 run was taken and left: scheduled, its attempt given back, nothing run
        wait_until(lambda: versioned_app.get_run(old).state == "scheduled", message="v1 run left")
        assert versioned_app.get_run(old).attempt == attempts
        assert tags(dsn)[old] == ["pack:v1"]
        v2.signal(signal.SIGTERM)
        v2.wait(30)
        assert "started on version 'v1' of its code; this worker has 'v2'" in v2.output()
    assert versioned_app.get_run(fresh).result == "v2"
    with WorkerProcess(dsn, VERSIONED, env={"WORKFLOW_VERSION": "v1"}).wait_ready():
        wait_until(lambda: states(dsn, [old]) == {"succeeded": 1}, timeout=30, message="v1")
    assert tags(dsn)[old] == ["pack:v1", "send:v1"]
    assert tags(dsn)[new] == ["pack:v2", "send:v2"]


def test_a_version_is_for_workflows() -> None:
    app = pgqueue.App()
    with pytest.raises(TypeError, match=r"version= is for @app\.workflow"):
        app.task(version="v1")(lambda: None)
