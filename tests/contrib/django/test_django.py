"""pgqueue.contrib.django, tested through the example project (examples/django_project):
Django's test client in this process, `manage.py pgqueue worker` as a real process, one
fresh database per test (a copy of a template migrated by Django and by pgqueue). Tests
that need other settings (psycopg2, connection lifetimes) run the small project in
tests/django_site in processes of their own.

Django 5.2 with the django_tasks backport, or Django 6 with django.tasks (.ci/django6)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("django")
if importlib.util.find_spec("django.tasks") is None:  # before Django 6: the backport
    pytest.importorskip("django_tasks")

from psycopg.conninfo import conninfo_to_dict

import pgqueue
from pgqueue.db import migrate
from pgqueue.runs.run import Run
from pgqueue.testing import drain
from tests.helpers import ROOT, scalar, wait_until
from tests.webapps import EXAMPLES, Databases, execute, run_command

PROJECT = EXAMPLES / "django_project"
SITE_SETTINGS = "tests.django_site.settings"


@pytest.fixture(scope="module")
def template(postgresql_noproc: Any) -> Iterator[tuple[Databases, str]]:
    """Django set up on the example project, and a database migrated by both."""
    if str(PROJECT) not in sys.path:
        sys.path.insert(0, str(PROJECT))
    databases = Databases(postgresql_noproc)
    name = databases.create("pgqueue_django_tpl")
    dsn = databases.dsn(name)
    saved = {k: os.environ.get(k) for k in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    os.environ["DJANGO_SETTINGS_MODULE"] = "myproj.settings"
    os.environ["DATABASE_URL"] = dsn
    import django
    from django.core.management import call_command
    from django.db import connections
    from django.test.utils import setup_test_environment, teardown_test_environment

    django.setup()
    try:
        setup_test_environment()  # responses carry their template context
        ours = True
    except RuntimeError:  # pytest-django did it already
        ours = False
    point_django_at(dsn)
    migrate.upgrade(dsn)
    call_command("migrate", verbosity=0)
    connections.close_all()
    try:
        yield databases, name
    finally:
        databases.drop(name)
        if ours:
            teardown_test_environment()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def point_django_at(dsn: str) -> None:
    """Django's connections (and the pgqueue App, through the integration) now use `dsn`."""
    from django.conf import settings
    from django.db import connections

    from pgqueue.contrib.django import conf

    connections.close_all()
    params = conninfo_to_dict(dsn)
    settings.DATABASES["default"].update(
        NAME=params["dbname"],
        HOST=params.get("host", ""),
        PORT=str(params.get("port", "")),
        USER=params.get("user", ""),
        PASSWORD=params.get("password", ""),
    )
    for app in (conf.get_app(), conf.default_app):
        app.configure(dsn=conf.database_dsn())


@pytest.fixture
def project_dsn(template: tuple[Databases, str]) -> Iterator[str]:
    from django.db import connections

    from pgqueue.contrib.django import conf

    databases, template_name = template
    name = databases.create("pgqueue_django", template=template_name)
    dsn = databases.dsn(name)
    point_django_at(dsn)
    try:
        yield dsn
    finally:
        connections.close_all()
        conf.get_app().close()
        conf.default_app.close()
        databases.drop(name)


def worker_burst(dsn: str) -> str:
    """`manage.py pgqueue worker --burst`: the DSN comes from DATABASES (no PGQUEUE_DSN)."""
    done = run_command(
        ["manage.py", "pgqueue", "worker", "--burst", "--log-level", "WARNING"],
        cwd=PROJECT,
        env={"DATABASE_URL": dsn},
    )
    return done.stdout + done.stderr


def test_dsn_comes_from_databases(project_dsn: str) -> None:
    from pgqueue.contrib.django import conf, get_app

    wanted = conninfo_to_dict(project_dsn)
    found = conninfo_to_dict(get_app().dsn)
    assert {k: found.get(k) for k in ("dbname", "host", "port", "user")} == {
        k: wanted.get(k) for k in ("dbname", "host", "port", "user")
    }
    assert get_app() is conf.get_app() and get_app().connection_provider is not None


def test_request_commits_row_and_run_together_then_a_worker_runs_it(project_dsn: str) -> None:
    from django.test import Client

    client = Client()
    response = client.post("/orders/", {"email": "ann@example.com"})
    assert response.status_code == 201, response.content
    order, run = response.json()["order"], response.json()["run"]
    # Both committed, seen from another connection.
    assert scalar(project_dsn, "SELECT status FROM orders_order WHERE id = %s", (order,)) == "new"
    assert scalar(project_dsn, "SELECT state FROM pgqueue.runs WHERE id = %s", (run,)) == "queued"

    worker_burst(project_dsn)

    assert client.get(f"/orders/{order}/").json()["status"] == "confirmed"
    assert scalar(project_dsn, "SELECT result FROM pgqueue.runs WHERE id = %s", (run,)) == (
        "confirmed"
    )


def test_a_worker_with_child_processes_runs_django_code(project_dsn: str) -> None:
    """`manage.py pgqueue worker --processes 1`: the children import the project's App
    from the module of its tasks (PGQUEUE['APP']) after setting Django up, so a task's ORM
    queries work there as in the worker's threads."""
    from django.test import Client

    response = Client().post("/orders/", {"email": "cy@example.com"})
    assert response.status_code == 201, response.content
    order, run = response.json()["order"], response.json()["run"]
    done = run_command(
        ["manage.py", "pgqueue", "worker", "--burst", "--processes", "1", "--log-level", "INFO"],
        cwd=PROJECT,
        env={"DATABASE_URL": project_dsn},
    )
    output = done.stdout + done.stderr
    assert scalar(project_dsn, "SELECT state FROM pgqueue.runs WHERE id = %s", (run,)) == (
        "succeeded"
    ), output
    assert scalar(project_dsn, "SELECT status FROM orders_order WHERE id = %s", (order,)) == (
        "confirmed"
    )


def test_a_request_that_fails_mid_transaction_leaves_neither_row_nor_run(
    project_dsn: str,
) -> None:
    from django.test import Client

    response = Client(raise_request_exception=False).post(
        "/orders/", {"email": "bob@example.com", "fail": "1"}
    )
    assert response.status_code == 500
    assert scalar(project_dsn, "SELECT count(*) FROM orders_order") == 0
    assert scalar(project_dsn, "SELECT count(*) FROM pgqueue.runs") == 0


def test_nested_atomic_rollback_and_outside_atomic(project_dsn: str) -> None:
    from django.db import transaction
    from myproj.tasks import confirm_order

    with transaction.atomic():
        kept = confirm_order.enqueue(1)
        try:
            with transaction.atomic():
                confirm_order.enqueue(2)
                raise RuntimeError("inner block fails")
        except RuntimeError:
            pass
    alone = confirm_order.enqueue(3)  # autocommit: pgqueue's own connection
    rows = scalar(project_dsn, "SELECT array_agg(id ORDER BY id) FROM pgqueue.runs")
    assert rows == [kept.id, alone.id]


def test_django_tasks_backend_runs_on_pgqueue_workers(project_dsn: str) -> None:
    from django.db import transaction
    from django.test import Client
    from orders.models import Order
    from orders.tasks import send_receipt

    from pgqueue.contrib.django import PgQueueBackend
    from pgqueue.contrib.django._framework import TaskResultStatus, task_enqueued

    client = Client()
    ok = Order.objects.create(email="cy@example.com")
    bad = Order.objects.create(email="dee@example.invalid")
    seen: list[Any] = []
    task_enqueued.connect(lambda sender, task_result, **_: seen.append(task_result.id))
    result_id = client.post(f"/orders/{ok.pk}/receipt/").json()["result_id"]
    once = PgQueueBackend("once", {"QUEUES": [], "OPTIONS": {"MAX_ATTEMPTS": 1}})
    failing = once.enqueue(send_receipt, [bad.pk], {})
    retried = send_receipt.enqueue(bad.pk)  # the default: 3 attempts
    with transaction.atomic():
        send_receipt.enqueue(ok.pk)
        transaction.set_rollback(True)  # the backend joined the block: no run
    assert seen[:3] == [result_id, failing.id, retried.id]
    assert client.get(f"/receipts/{result_id}/").json() == {"status": "READY", "attempts": 0}
    run = scalar(
        project_dsn, "SELECT row_to_json(r) FROM pgqueue.runs r WHERE id = %s", (int(result_id),)
    )
    assert (run["task"], run["queue"], run["priority"]) == (
        "orders.tasks.send_receipt",
        "receipts",
        -10,
    )
    assert scalar(project_dsn, "SELECT count(*) FROM pgqueue.runs") == 3

    worker_burst(project_dsn)

    assert client.get(f"/receipts/{result_id}/").json() == {
        "status": "SUCCESSFUL",
        "attempts": 1,
        "value": "receipt sent to cy@example.com",
    }
    assert Order.objects.get(pk=ok.pk).receipt_sent_at is not None
    failing.refresh()
    assert failing.status == TaskResultStatus.FAILED and failing.is_finished
    assert failing.errors[-1].exception_class is ValueError
    assert "cannot mail dee@example.invalid" in failing.errors[-1].traceback
    with pytest.raises(ValueError, match="failed"):
        _ = failing.return_value
    retried.refresh()  # failed once, due again after a backoff
    assert (retried.status, retried.attempts, len(retried.errors)) == ("READY", 1, 1)
    # the worker that ran the failed attempt, as pgqueue recorded it
    query = "SELECT worker_id::text FROM pgqueue.run_errors WHERE run_id = %s"
    assert retried.worker_ids == [scalar(project_dsn, query, (int(retried.id),))]
    assert client.get("/receipts/nope/").status_code == 404


def test_management_command_and_schema_check(
    project_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from django.core import checks
    from django.core.management import call_command

    def warnings() -> list[str]:
        return [
            m.id for m in checks.run_checks(databases=["default"]) if m.id.startswith("pgqueue")
        ]

    assert warnings() == []
    call_command("pgqueue", "runs", "list", "--json")
    assert json.loads(capsys.readouterr().out) == []
    execute(project_dsn, "UPDATE pgqueue.alembic_version SET version_num = '0001'")
    assert warnings() == ["pgqueue.W004"]
    execute(project_dsn, "DROP SCHEMA pgqueue CASCADE")
    assert warnings() == ["pgqueue.W003"]
    call_command("pgqueue", "migrate")
    assert f"revision {migrate.head()}" in capsys.readouterr().out
    assert warnings() == []
    with pytest.raises(SystemExit) as failed:
        call_command("pgqueue", "runs", "show", "12345")
    assert failed.value.code == 2
    assert "no run with id 12345" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("pgqueue", "message"),
    [
        ({"APP": "myproj.tasks"}, "PGQUEUE['APP'] must look like 'module:attr'"),
        ({"APP": "myproj.tasks:confirm_order"}, "PGQUEUE['APP'] = 'myproj.tasks:confirm_order'"),
    ],
)
def test_the_management_command_says_what_is_misconfigured_in_one_line(
    project_dsn: str,
    capsys: pytest.CaptureFixture[str],
    pgqueue: dict[str, str],
    message: str,
) -> None:
    """A PGQUEUE or DATABASES that pgqueue cannot use (an unknown alias, an APP that is
    not 'module:attr', a database that is not PostgreSQL): `manage.py pgqueue ...` prints
    one `error:` line and exits 2, as the pgqueue command does, not a traceback."""
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings

    from pgqueue.contrib.django.management.commands.pgqueue import Command

    with override_settings(PGQUEUE={**settings.PGQUEUE, **pgqueue}):
        with pytest.raises(SystemExit) as failed:
            Command().run_from_argv(["manage.py", "pgqueue", "migrate"])
        assert failed.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {message}") and err.count("\n") == 1, err
        with pytest.raises(SystemExit) as failed:
            call_command("pgqueue", "migrate")
        assert failed.value.code == 2
        assert capsys.readouterr().err.startswith(f"error: {message}")


def test_a_database_that_is_not_postgresql_is_one_error_line() -> None:
    """A project fresh from `startproject` (SQLite): the check and `manage.py pgqueue`
    say what to change, in one line, and exit non-zero."""
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT), str(ROOT)])
    env["DJANGO_SETTINGS_MODULE"] = "tests.django_site.sqlite_settings"
    wanted = (
        "pgqueue needs PostgreSQL, but DATABASES['default'] is sqlite: set its ENGINE to "
        "django.db.backends.postgresql, or point PGQUEUE['DATABASE'] at a PostgreSQL alias"
    )

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    check = manage("check")
    assert check.returncode == 1
    assert f"(pgqueue.E001) {wanted}" in check.stderr, check.stderr
    command = manage("pgqueue", "migrate")
    assert command.returncode == 2
    assert command.stderr == f"error: {wanted}\n", command.stderr


def test_the_management_command_worker_gets_the_default_concurrency(
    project_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`manage.py pgqueue worker` with no --concurrency gets the default app.worker()
    gets (default_concurrency: the example project's tasks are sync), and an explicit one
    wins."""
    from django.core.management import call_command

    from pgqueue.contrib.django import conf
    from pgqueue.worker import SYNC_CONCURRENCY, Worker
    from pgqueue.worker.defaults import default_concurrency

    seen: list[int] = []
    monkeypatch.setattr(Worker, "run", lambda self, burst=False: seen.append(self.concurrency))
    call_command("pgqueue", "worker", "--burst")
    call_command("pgqueue", "worker", "--burst", "--concurrency", "7")
    app = conf.get_app()
    assert seen == [default_concurrency(app.tasks.values()), 7]
    assert seen[0] == SYNC_CONCURRENCY == app.worker(install_signal_handlers=False).concurrency


# -- psycopg2 ---------------------------------------------------------------------------


def test_on_psycopg2_enqueue_in_atomic_waits_for_the_commit(dsn: str) -> None:
    """Django on psycopg2 (psycopg 3 hidden from its backend, in a process of its own):
    enqueue cannot join the transaction, so it enqueues at transaction.on_commit."""
    pytest.importorskip("psycopg2")
    done = run_command(
        ["-m", "tests.django_site.psycopg2_enqueue"],
        cwd=ROOT,
        env={
            "DATABASE_URL": dsn,
            "DJANGO_SETTINGS_MODULE": SITE_SETTINGS,
            "DJANGO_DB_DRIVER": "psycopg2",
        },
    )
    seen = json.loads(done.stdout)
    assert seen["driver"].startswith("psycopg2")
    assert seen["checks"] == ["pgqueue.W001"]  # the system check says so too
    # Inside the block: no run yet, and no id to read.
    assert seen["inside"] == {"runs": [], "id": "RunNotCommitted"}
    # After the commit: the runs exist, with the block's row, and the handles have ids.
    committed = seen["committed"]
    assert committed["runs"] == [committed["id"], *committed["many"]]
    assert committed["state"] == "queued"
    assert committed["notes"] == ["row of the committed block"]
    # Rollback: no run (and no row: see the notes at the end).
    assert seen["rolled_back"] == {"runs": committed["runs"], "id": "RunNotCommitted"}
    # A savepoint rolled back takes its enqueue along; enqueue_on_commit() is the same.
    nested = seen["nested"]
    assert nested["runs"] == [*committed["runs"], nested["outer"], nested["explicit"]]
    # Outside atomic(): at once, a plain handle.
    assert seen["alone"] == {
        "id": seen["alone"]["id"],
        "type": "RunHandle",
        "runs": [*nested["runs"], seen["alone"]["id"]],
    }
    # Django's tasks framework: the result's id (the run's) comes with the commit.
    assert seen["result_inside"] == {"id": "", "runs": seen["alone"]["runs"]}
    assert seen["result"] == {
        "id": seen["result"]["id"],
        "runs": [*seen["alone"]["runs"], int(seen["result"]["id"])],
    }
    # A worker runs all of them; its threads use psycopg2 connections too.
    assert seen["drained"]["succeeded"] == len(seen["result"]["runs"])
    assert seen["notes_after_worker"] == sorted(
        [
            *("row of the committed block", "committed", "many 1", "many 2"),
            *("outer", "on commit", "alone"),  # not "rolled back", "inner"
        ]
    )
    assert [d.split(".")[0] for d in seen["drivers"]] == ["psycopg2"]
    assert seen["result_value"] == "HELLO"
    # Traced: the run inserted at the commit carries the enqueue span's trace context.
    traced = seen["traced"]
    assert traced["enqueue_parent"] is True
    _version, trace_id, span_id, _flags = traced["headers"]["traceparent"].split("-")
    assert (trace_id, span_id) == (traced["request"], traced["enqueue_span"])


# -- Django's connections on workers ----------------------------------------------------


@contextlib.contextmanager
def site_worker(
    dsn: str, *args: str, env: dict[str, str] | None = None, outputs: list[str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """`django-admin pgqueue worker` on tests/django_site, as a real process. Its output,
    once it has stopped, is appended to `outputs`."""
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    env.update(PYTHONPATH=str(ROOT), DATABASE_URL=dsn, DJANGO_SETTINGS_MODULE=SITE_SETTINGS)
    env.update(extra)
    command = [sys.executable, "-m", "django", "pgqueue", "worker", "--log-level", "WARNING"]
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            [*command, *args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True
        )

        def output() -> str:
            log.seek(0)
            return log.read()

        def registered() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"worker exited early:\n{output()}")
            query = "SELECT count(*) FROM pgqueue.workers WHERE pid = %s"
            return bool(scalar(dsn, query, (proc.pid,)))

        try:
            wait_until(registered, message="the Django worker to register")
            yield proc
        except BaseException:
            print(output())
            raise
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            if outputs is not None:
                outputs.append(output())


def test_worker_refreshes_django_connections_around_each_run(dsn: str, app: pgqueue.App) -> None:
    """As around a request: a connection killed between two runs is not reused, and one
    past its CONN_MAX_AGE is closed when the run ends. One thread: one connection per
    alias, reused from run to run."""

    def run(alias: str) -> Run:
        handle = app.enqueue_by_name("tests.django_site.tasks.backend_pid", [alias], max_attempts=1)
        return wait_until(lambda: (r := app.get_run(handle.id)).finished and r, message="a run")

    def alive(pid: int) -> bool:
        return bool(scalar(dsn, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)))

    def kill(pid: int) -> None:
        assert scalar(dsn, "SELECT pg_terminate_backend(%s, 10000)", (pid,))

    with site_worker(dsn, "--concurrency", "1"):
        first = run("default").result
        assert run("default").result == first  # CONN_MAX_AGE=None: kept between runs
        unchecked = run("unchecked").result
        kill(first)
        kill(unchecked)

        # CONN_HEALTH_CHECKS: refreshed before the run, the dead connection is replaced.
        after_kill = run("default")
        assert (after_kill.state, after_kill.error) == ("succeeded", None)
        assert after_kill.result != first

        # No health checks: the next run meets the dead connection and fails...
        broken = run("unchecked")
        assert broken.state == "failed" and "OperationalError" in (broken.error or "")
        # ...which Django marks, so the refresh closes it: the run after reconnects.
        healed = run("unchecked")
        assert healed.state == "succeeded" and healed.result != unchecked

        # CONN_MAX_AGE=0 (Django's default): closed as the run ends, as after a request.
        per_run = run("per_run").result
        wait_until(lambda: not alive(per_run), message="the run's connection to close")
        assert alive(after_kill.result)  # the persistent one stays


def test_sync_wrappers_run_around_each_sync_call_in_the_worker_thread(
    app: pgqueue.App,
) -> None:
    """The core hook the Django integration uses: App.sync_wrappers, first one outermost,
    around sync tasks, workflows and hooks, in the thread that runs them; not around
    async tasks (they run on the event loop)."""
    seen: list[tuple[str, str, int, str]] = []
    worker_threads: set[str] = set()

    def wrapper(label: str, bump: int) -> Callable[[pgqueue.Context, Callable[[], Any]], Any]:
        def around(ctx: pgqueue.Context, call: Callable[[], Any]) -> Any:
            seen.append((label, ctx.task.rsplit(".", 1)[-1], ctx.run_id, "enter"))
            try:
                value = call()
                return value + bump if isinstance(value, int) else value
            finally:
                seen.append((label, ctx.task.rsplit(".", 1)[-1], ctx.run_id, "exit"))

        return around

    def hook(ctx: pgqueue.Context, result: Any) -> None:
        worker_threads.add(threading.current_thread().name)
        seen.append(("hook", ctx.task.rsplit(".", 1)[-1], ctx.run_id, str(result)))

    @app.task(name="plain", on_success=hook)
    def plain() -> int:
        worker_threads.add(threading.current_thread().name)
        return 1

    @app.workflow(name="flow")
    def flow(ctx: pgqueue.Context) -> int:
        return int(ctx.step("one", lambda: 10))

    @app.task(name="coro")
    async def coro() -> int:
        return 100

    app.sync_wrappers.extend([wrapper("outer", 1000), wrapper("inner", 1)])
    runs = [plain.enqueue().id, flow.enqueue().id, coro.enqueue().id]
    assert drain(app, concurrency=1)["succeeded"] == 3

    assert [app.get_run(i).result for i in runs] == [1002, 1011, 100]
    p, f = runs[0], runs[1]
    assert [e for e in seen if e[2] == p] == [
        ("outer", "plain", p, "enter"),
        ("inner", "plain", p, "enter"),
        ("inner", "plain", p, "exit"),
        ("outer", "plain", p, "exit"),
        ("outer", "plain", p, "enter"),  # the on_success hook: wrapped too
        ("inner", "plain", p, "enter"),
        ("hook", "plain", p, "1002"),
        ("inner", "plain", p, "exit"),
        ("outer", "plain", p, "exit"),
    ]
    assert [e for e in seen if e[2] == f] == [
        ("outer", "flow", f, "enter"),
        ("inner", "flow", f, "enter"),
        ("inner", "flow", f, "exit"),
        ("outer", "flow", f, "exit"),
    ]
    assert len(seen) == 13  # nothing around the async task
    assert threading.current_thread().name not in worker_threads


def test_the_worker_prints_each_django_log_line_once(dsn: str, app: pgqueue.App) -> None:
    """With DEBUG on, Django's LOGGING prints `django.*` records to the console itself:
    the worker's own log handler does not print them again."""
    handle = app.enqueue_by_name("tests.django_site.tasks.chatty", ["hello"])
    outputs: list[str] = []
    with site_worker(dsn, "--log-level", "INFO", env={"DJANGO_DEBUG": "1"}, outputs=outputs):
        wait_until(lambda: app.get_run(handle.id).finished, message="the run")
    [output] = outputs
    assert output.count("chatty says hello") == 1, output
    # the tasks framework's own line as the run starts (django.tasks on Django 6, printed
    # by Django's LOGGING; django_tasks on 5.2, printed by the worker's handler)
    started = f"Task id={handle.id} path=tests.django_site.tasks.chatty state=RUNNING"
    assert output.count(started) == 1, output


def test_task_results_name_the_worker_that_runs_the_attempt(dsn: str, app: pgqueue.App) -> None:
    handle = app.enqueue_by_name("tests.django_site.tasks.whoami")
    with site_worker(dsn) as proc:
        run = wait_until(lambda: (r := app.get_run(handle.id)).finished and r, message="run")
        worker_id = scalar(dsn, "SELECT id::text FROM pgqueue.workers WHERE pid = %s", (proc.pid,))
    assert run.state == "succeeded", run.error
    assert run.result == [worker_id]


def test_worker_ids_has_one_entry_per_attempt() -> None:
    import uuid

    from pgqueue.contrib.django.backend import UNRECORDED_WORKER, _worker_ids

    a, b = uuid.uuid4(), uuid.uuid4()
    errors = [
        {"attempt": 1, "worker_id": a},
        {"attempt": 2, "worker_id": None},  # a retry by hand: no worker
    ]
    assert _worker_ids(3, errors, b) == [str(a), UNRECORDED_WORKER, str(b)]
    assert _worker_ids(1, [], None) == [UNRECORDED_WORKER]
