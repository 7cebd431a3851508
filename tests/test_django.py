"""pgqueue.contrib.django, tested through the example project (examples/django_project):
Django's test client in this process, `manage.py pgqueue worker` as a real process, one
fresh database per test (a copy of a template migrated by Django and by pgqueue)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("django")
pytest.importorskip("django_tasks")

from psycopg.conninfo import conninfo_to_dict

from pgqueue import migrate
from tests.helpers import scalar
from tests.webapps import EXAMPLES, Databases, execute, run_command

PROJECT = EXAMPLES / "django_project"


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
    from django_tasks import TaskResultStatus
    from django_tasks.signals import task_enqueued
    from orders.models import Order
    from orders.tasks import send_receipt

    from pgqueue.contrib.django import PgQueueBackend

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
    assert client.get("/receipts/nope/").status_code == 404


def test_admin_lists_filters_searches_cancels_and_retries(project_dsn: str) -> None:
    from django.contrib.auth.models import User
    from django.test import Client
    from myproj.tasks import app, confirm_order

    client = Client()
    client.force_login(User.objects.create(username="admin", is_staff=True, is_superuser=True))
    first = confirm_order.enqueue(1)
    second = confirm_order.options(queue="other").enqueue(2)
    page = client.get("/admin/pgqueue/run/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "myproj.tasks.confirm_order" in text and "Cancel selected runs" in text
    only_other = client.get("/admin/pgqueue/run/", {"queue": "other"}).context["cl"]
    assert [r.id for r in only_other.result_list] == [second.id]
    found = client.get("/admin/pgqueue/run/", {"q": str(first.id)}).context["cl"]
    assert [r.id for r in found.result_list] == [first.id]
    detail = client.get(f"/admin/pgqueue/run/{first.id}/change/")
    assert detail.status_code == 200 and "Save" not in detail.content.decode()  # read-only
    assert client.get("/admin/pgqueue/run/add/").status_code == 403

    def act(action: str, *ids: int) -> None:
        response = client.post(
            "/admin/pgqueue/run/",
            {"action": action, "_selected_action": [str(i) for i in ids]},
            follow=True,
        )
        assert response.status_code == 200

    act("cancel_runs", first.id, second.id)
    assert {app.get_run(first.id).state, app.get_run(second.id).state} == {"canceled"}
    act("retry_runs", first.id)
    assert app.get_run(first.id).state == "queued"


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
