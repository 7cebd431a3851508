"""Every task knows its run (docs/workflows.md): pgqueue.current(), ctx.progress(),
Context.cancelled, on_retry, validators' values and cancel reasons, with real workers."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psycopg
import pytest

import pgqueue
from tests.apps import ctx as tasks
from tests.apps.basic import EFFECTS_DDL
from tests.helpers import ROOT, WorkerProcess, effect_tags, scalar, wait_until

APP = "tests.apps.ctx:app"


@pytest.fixture
def ctx_app(dsn: str, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute(EFFECTS_DDL)
    tasks.app.configure(dsn=dsn)
    return tasks.app


def test_current_in_every_kind_of_task(dsn: str, ctx_app: pgqueue.App) -> None:
    sync = tasks.sync_facts.options(priority=-3, group="tenant-7").enqueue(5, tag="x")
    async_ = tasks.async_facts.enqueue()
    flow = tasks.flow_facts.enqueue()
    out = tasks.outside.enqueue()
    with WorkerProcess(dsn, APP).wait_ready():
        got = sync.wait(timeout=20)
        assert got == {
            "run_id": sync.id,
            "task": "ctx.sync_facts",
            "queue": "default",
            "group": "tenant-7",
            "priority": -3,
            "attempt": 1,
            "max_attempts": 4,
            "args": [5],
            "kwargs": {"tag": "x"},
            "cancelled": False,
            "thread_run_id": sync.id,
        }
        a = async_.wait(timeout=20)
        assert (a["run_id"], a["task"], a["group"], a["thread_run_id"]) == (
            async_.id,
            "ctx.async_facts",
            None,
            async_.id,
        )
        f = flow.wait(timeout=20)
        assert (f["run_id"], f["same"]) == (flow.id, True)
        assert "outside a run" in out.wait(timeout=20)
    with pytest.raises(RuntimeError, match="outside a run"):
        pgqueue.current()


def test_progress_is_stored_throttled_and_shown(dsn: str, ctx_app: pgqueue.App) -> None:
    # Count the writes of the column: 500 reports in well under a second make two (the
    # first at once, the last when the attempt ends).
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("""
            CREATE FUNCTION note_progress() RETURNS trigger LANGUAGE plpgsql
            SET search_path = public, pg_catalog AS $$
            BEGIN
                INSERT INTO effects (run_id, tag) VALUES (NEW.id, 'progress write');
                RETURN NEW;
            END $$;
            CREATE TRIGGER note_progress AFTER UPDATE OF progress ON pgqueue.runs
                FOR EACH ROW EXECUTE FUNCTION note_progress();
        """)
    quick = tasks.progress_quick.enqueue(500)
    waiting = tasks.progress_then_wait.enqueue(3)
    with WorkerProcess(dsn, APP).wait_ready():
        quick.wait(timeout=20)
        wait_until(lambda: "reported" in effect_tags(dsn, waiting.id), message="reports")
        # the last report reaches the row while the run still runs (the next write due)
        shown = wait_until(
            lambda: (p := ctx_app.get_run(waiting.id).progress) and p["done"] == 3 and p,
            message="the last progress report",
        )
        assert shown["total"] == 3 and shown["message"] == "item 3" and "at" in shown
        cli = subprocess.run(
            [sys.executable, "-m", "pgqueue", "runs", "show", str(waiting.id), "--dsn", dsn],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        assert '"message": "item 3"' in cli.stdout
        in_sql = "SELECT progress->>'message' FROM pgqueue.runs WHERE id = %s"
        assert scalar(dsn, in_sql, (waiting.id,)) == "item 3"
        in_view = "SELECT progress->>'done' FROM pgqueue.running WHERE id = %s"
        assert scalar(dsn, in_view, (waiting.id,)) == "3"
        assert ctx_app.cancel(waiting.id, reason="tested")
        wait_until(lambda: "saw cancel" in effect_tags(dsn, waiting.id), message="ctx.cancelled")
    final = ctx_app.get_run(quick.id).progress
    assert final is not None and final["done"] == 500 and final["total"] == 500
    assert effect_tags(dsn, quick.id) == ["progress write"] * 2


def test_progress_of_a_stale_attempt_is_ignored(ctx_app: pgqueue.App, dsn: str) -> None:
    from pgqueue.runs.progress import Progress

    h = tasks.slow.enqueue(60)
    with WorkerProcess(dsn, APP).wait_ready():
        wait_until(lambda: ctx_app.get_run(h.id).state == "running", message="running")
        token = scalar(dsn, "SELECT lease_token::text FROM pgqueue.runs WHERE id = %s", (h.id,))
        Progress(ctx_app, h.id, "00000000-0000-0000-0000-000000000000").report({"done": 1})
        assert ctx_app.get_run(h.id).progress is None  # another attempt's token
        Progress(ctx_app, h.id, token).report({"done": 2})
        assert ctx_app.get_run(h.id).progress["done"] == 2  # type: ignore[index]
        ctx_app.cancel(h.id)
        Progress(ctx_app, h.id, token).report({"done": 3})  # the lease went with the cancel
        assert ctx_app.get_run(h.id).progress["done"] == 2  # type: ignore[index]


def test_async_task_sees_cancelled_and_reports_progress(dsn: str, ctx_app: pgqueue.App) -> None:
    h = tasks.async_progress.enqueue()
    with WorkerProcess(dsn, APP).wait_ready():
        wait_until(lambda: "reported" in effect_tags(dsn, h.id), message="report")
        wait_until(lambda: ctx_app.get_run(h.id).progress, message="async progress write")
        assert ctx_app.get_run(h.id).progress["message"] == "half"  # type: ignore[index]
        ctx_app.cancel(h.id, reason="enough")
        wait_until(lambda: effect_tags(dsn, h.id)[2:], message="the cancellation")
    assert effect_tags(dsn, h.id) == [
        "ctx.wait_cancelled() would block the event loop",
        "reported",
        "cancelled flag True",
    ]


def test_bad_progress_reports_are_one_line_errors() -> None:
    ctx = pgqueue.Context(1, "t", "q", 1, 1, [], {})
    with pytest.raises(pgqueue.InvalidArguments, match="progress done must be a number"):
        ctx.progress("3")  # type: ignore[arg-type]
    with pytest.raises(pgqueue.OutOfRange, match="finite"):
        ctx.progress(float("nan"))
    with pytest.raises(pgqueue.OutOfRange, match="over 1000"):
        ctx.progress(1, message="x" * 1001)
    ctx.progress(1, 10, "kept in memory without an App")
    assert ctx.last_progress == {"done": 1, "total": 10, "message": "kept in memory without an App"}


def test_on_retry_runs_after_each_failed_attempt_that_will_be_retried(
    dsn: str, ctx_app: pgqueue.App
) -> None:
    flaky = tasks.flaky.enqueue(2)
    doomed = tasks.doomed.enqueue()
    async_flaky = tasks.async_flaky.enqueue()
    limited = tasks.rate_limited.enqueue()
    with WorkerProcess(dsn, APP).wait_ready():
        assert flaky.wait(timeout=20) == 3  # the hook's error on attempt 2 changed nothing
        with pytest.raises(pgqueue.RunFailed):
            doomed.wait(timeout=20)
        assert async_flaky.wait(timeout=20) == 2
        assert limited.wait(timeout=20) == "ok"
        wait_until(lambda: len(effect_tags(dsn, doomed.id)) == 2, message="doomed's hooks")
    assert effect_tags(dsn, flaky.id) == [
        "on_retry 1 ValueError: attempt 1 broke",
        "on_retry 2 ValueError: attempt 2 broke",
    ]
    assert effect_tags(dsn, doomed.id) == ["on_retry 1 ValueError: always", "on_failure 2"]
    assert effect_tags(dsn, async_flaky.id) == ["async on_retry 1 True"]
    assert effect_tags(dsn, limited.id) == ["ran", "ran"]  # RetryAfter: no hook


def test_the_task_receives_the_validators_values(dsn: str, ctx_app: pgqueue.App) -> None:
    typed = tasks.typed.enqueue("5")
    converted = tasks.converted.enqueue("42")
    with pytest.raises(pgqueue.ValidationError, match="digits"):
        tasks.converted.enqueue("x")
    with pytest.raises(pgqueue.ValidationError, match="int"):
        tasks.typed.enqueue("five")
    # stored as given (JSON), validated again by the worker
    assert ctx_app.get_run(typed.id).args == ["5"]
    with WorkerProcess(dsn, APP).wait_ready():
        assert typed.wait(timeout=20) == ["int", "5", "float"]
        assert converted.wait(timeout=20) == "int"


def test_a_validator_must_return_a_mapping_of_parameters(app: pgqueue.App) -> None:
    @app.task(validator=lambda n: [n])
    def listed(n: int) -> None: ...

    @app.task(validator=lambda n: {"m": n})
    def renamed(n: int) -> None: ...

    with pytest.raises(pgqueue.InvalidArguments, match=r"must return None .* or a mapping"):
        listed.enqueue(1)
    with pytest.raises(pgqueue.InvalidArguments, match=r"\['m'\], which are not parameters"):
        renamed.enqueue(1)


def test_cancel_reason_is_stored_and_shown(dsn: str, ctx_app: pgqueue.App) -> None:
    h = tasks.slow.options(delay=3600).enqueue(1)
    other = tasks.slow.options(delay=3600).enqueue(1)
    assert ctx_app.cancel(h.id, reason="customer asked")
    assert ctx_app.get_run(h.id).cancel_reason == "customer asked"
    with pytest.raises(pgqueue.RunCanceled):
        h.wait(timeout=1)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pgqueue", *args, "--dsn", dsn],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )

    done = cli("runs", "cancel", str(other.id), "--reason", "duplicate of another")
    assert done.returncode == 0 and "duplicate of another" in done.stdout, done.stderr
    assert "cancel_reason: duplicate of another" in cli("runs", "show", str(other.id)).stdout
    listed = cli("runs", "list", "--json").stdout
    assert '"cancel_reason": "customer asked"' in listed
    long = cli("runs", "cancel", str(h.id), "--reason", "x" * 1001)
    assert long.returncode == 2 and "1000-byte limit" in long.stderr
    assert "Traceback" not in long.stderr
    # by filter: every run it cancels gets the reason
    batch = [tasks.slow.options(delay=3600, queue="batch").enqueue(1) for _ in range(3)]
    bulk = cli("runs", "cancel", "--queue", "batch", "--reason", "queue retired", "--yes")
    assert bulk.returncode == 0 and "3 runs canceled" in bulk.stdout, bulk.stderr
    assert {ctx_app.get_run(b.id).cancel_reason for b in batch} == {"queue retired"}
    assert ctx_app.cancel_where(queue="default", state="scheduled", reason="sweep") == 0
    # SQL: the function's old callers, and a reason from psql
    third = tasks.slow.options(delay=3600).enqueue(1)
    assert scalar(dsn, "SELECT pgqueue.cancel(%s, false, 'from psql')", (third.id,))
    assert ctx_app.get_run(third.id).cancel_reason == "from psql"
    fourth = tasks.slow.options(delay=3600).enqueue(1)
    assert scalar(dsn, "SELECT pgqueue.cancel(%s)", (fourth.id,))
    with pytest.raises(pgqueue.InvalidArguments, match="1000-byte limit"):
        ctx_app.cancel(fourth.id, reason="x" * 1001)


def test_eager_runs_have_a_context_and_the_validators_values(app: pgqueue.App) -> None:
    from pgqueue import testing

    @app.task(validator=lambda n: {"n": int(n)}, priority=4)
    def look(n: int) -> list[Any]:
        ctx = pgqueue.current()
        ctx.progress(1, 2)
        return [type(n).__name__, ctx.priority, ctx.group, ctx.last_progress]

    @app.task
    async def look_async() -> int:
        return pgqueue.current().run_id

    with testing.eager(app):
        assert look.options(group="g").enqueue("7").wait() == [
            "int",
            4,
            "g",
            {"done": 1, "total": 2, "message": None},
        ]
        h = look_async.enqueue()
        assert h.wait() == h.id
    with pytest.raises(RuntimeError, match="outside a run"):
        pgqueue.current()


def test_worker_id_names_the_worker_running_the_attempt(app: pgqueue.App) -> None:
    from tests.helpers import InProcessWorker

    @app.task()
    def which() -> str:
        return str(pgqueue.current().worker_id)

    @app.task()
    async def which_async() -> str:
        return str(pgqueue.current().worker_id)

    handles = [which.enqueue(), which_async.enqueue()]
    with InProcessWorker(app) as worker:
        assert [h.wait(timeout=20) for h in handles] == [str(worker.id)] * 2
