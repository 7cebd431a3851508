"""The dashboard mounted in Django (docs/dashboard.md): behind Django's own login, staff to view,
the pgqueue.change_run permission to act. Runs on the example project, as
tests/contrib/django/test_django.py does, with the dashboard included in its URLs."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("django")
if importlib.util.find_spec("django.tasks") is None:
    pytest.importorskip("django_tasks")

from tests.contrib.django.test_django import project_dsn, template
from tests.helpers import scalar

__all__ = ["project_dsn", "template"]

URLS = "tests.django_site.dashboard_urls"


@pytest.fixture
def site(project_dsn: str) -> Iterator[str]:
    from django.test import override_settings

    with override_settings(ROOT_URLCONF=URLS):
        yield project_dsn


def user(name: str, *, staff: bool, act: bool = False) -> Any:
    from django.contrib.auth.models import Permission, User

    u = User.objects.create_user(name, password="pw", is_staff=staff)
    if act:
        u.user_permissions.add(
            Permission.objects.get(content_type__app_label="pgqueue", codename="change_run")
        )
    return u


def queued_run(dsn: str) -> int:
    return int(scalar(dsn, "SELECT pgqueue.enqueue('orders.tasks.noop', queue => 'mail')"))


def state(dsn: str, run_id: int) -> str:
    return str(scalar(dsn, "SELECT state FROM pgqueue.runs WHERE id = %s", (run_id,)))


def test_a_staff_user_sees_the_dashboard(site: str) -> None:
    from django.test import Client

    run_id = queued_run(site)
    client = Client()
    client.force_login(user("staff", staff=True))
    page = client.get("/ops/pgqueue/")
    assert page.status_code == 200 and b"Overview" in page.content
    assert b'href="/ops/pgqueue/runs"' in page.content
    runs = client.get("/ops/pgqueue/api/runs").json()["runs"]
    assert [r["id"] for r in runs] == [run_id]
    assert client.get(f"/ops/pgqueue/runs/{run_id}").status_code == 200
    assert client.get("/ops/pgqueue/static/dashboard.css").status_code == 200


def test_anyone_else_is_sent_to_the_login_page(site: str) -> None:
    from django.test import Client

    anonymous = Client()
    response = anonymous.get("/ops/pgqueue/runs")
    assert response.status_code == 302
    # LOGIN_URL is Django's default (/accounts/login/, a 404 in this project) and the
    # admin is installed: its login page
    assert response["Location"].startswith("/admin/login/")
    assert "next=/ops/pgqueue/runs" in response["Location"]

    client = Client()
    client.force_login(user("someone", staff=False))
    assert client.get("/ops/pgqueue/api/queues").status_code == 302
    run_id = queued_run(site)
    assert client.post(f"/ops/pgqueue/api/runs/{run_id}/cancel").status_code == 302
    assert state(site, run_id) == "queued"


def test_only_change_run_may_act(site: str) -> None:
    from django.test import Client

    run_id = queued_run(site)
    viewer = Client()
    viewer.force_login(user("viewer", staff=True))
    viewer.get("/ops/pgqueue/")
    headers = {"X-CSRF-Token": viewer.cookies["pgqueue_csrf"].value}
    response = viewer.post(f"/ops/pgqueue/api/runs/{run_id}/cancel", headers=headers)
    assert response.status_code == 403 and "change_run" in response.json()["error"]
    assert state(site, run_id) == "queued"

    operator = Client()
    operator.force_login(user("operator", staff=True, act=True))
    operator.get("/ops/pgqueue/")
    headers = {"X-CSRF-Token": operator.cookies["pgqueue_csrf"].value}
    # the dashboard's own CSRF check holds in Django too
    refused = operator.post(f"/ops/pgqueue/api/runs/{run_id}/cancel")
    assert refused.status_code == 403
    response = operator.post(f"/ops/pgqueue/api/runs/{run_id}/cancel", headers=headers)
    assert response.json() == {"id": run_id, "canceled": True}
    assert state(site, run_id) == "canceled"


def test_a_login_url_of_the_project_is_used(site: str) -> None:
    from django.test import Client, override_settings

    with override_settings(LOGIN_URL="/signin/"):
        response = Client().get("/ops/pgqueue/")
    assert response.status_code == 302
    assert response["Location"].startswith("/signin/?next=/ops/pgqueue/")


def test_the_mounted_dashboard_without_jinja2_leaves_manage_py_working(
    project_dsn: str,
) -> None:
    """Only pgqueue-jobs[django] installed: the URLconf that includes the dashboard loads
    (every manage.py command loads it), and the dashboard says what to install."""
    from tests.contrib.django.test_django import PROJECT
    from tests.webapps import run_command

    done = run_command(
        ["-m", "tests.django_site.without_jinja2"],
        cwd=PROJECT,
        env={
            "DJANGO_SETTINGS_MODULE": "tests.django_site.mounted_settings",
            "DATABASE_URL": project_dsn,
        },
    )
    assert "System check identified no issues" in done.stdout
    assert (
        "dashboard: the pgqueue dashboard needs jinja2: pip install 'pgqueue-jobs[dashboard]'"
        in done.stdout
    )
    # a staff user's request: the same one line, not the import's ModuleNotFoundError
    assert (
        "view: the pgqueue dashboard needs jinja2: pip install 'pgqueue-jobs[dashboard]'"
        in done.stdout
    ), done.stdout + done.stderr
