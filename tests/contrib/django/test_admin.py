"""The Django admin of pgqueue runs (pgqueue.contrib.django.admin), through Django's test
client on the example project (the fixtures of tests/contrib/django/test_django.py): who
may act, and what a run's page shows."""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import pytest

pytest.importorskip("django")
if importlib.util.find_spec("django.tasks") is None:
    pytest.importorskip("django_tasks")

from pgqueue.testing import drain
from tests.contrib.django.test_django import project_dsn, template

__all__ = ["project_dsn", "template"]  # fixtures, shared with tests/contrib/django/test_django.py

FLOW = "tests.admin_flow"


def staff(username: str, *perms: str, superuser: bool = False) -> Any:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create(username=username, is_staff=True, is_superuser=superuser)
    user.user_permissions.set(Permission.objects.filter(codename__in=perms))
    return user


def post_action(client: Any, action: str, *ids: int) -> str:
    response = client.post(
        "/admin/pgqueue/run/",
        {"action": action, "_selected_action": [str(i) for i in ids]},
        follow=True,
    )
    assert response.status_code in (200, 403)
    return str(response.content.decode())


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


def test_a_view_only_staff_user_sees_runs_but_cannot_cancel_or_retry(project_dsn: str) -> None:
    from django.test import Client
    from myproj.tasks import app, confirm_order

    viewer, actor = Client(), Client()
    viewer.force_login(staff("viewer", "view_run"))
    actor.force_login(staff("actor", "view_run", "change_run"))
    run = confirm_order.enqueue(1)

    listing = viewer.get("/admin/pgqueue/run/")
    assert listing.status_code == 200
    assert "myproj.tasks.confirm_order" in listing.content.decode()
    assert "Cancel selected runs" not in listing.content.decode()
    assert viewer.get(f"/admin/pgqueue/run/{run.id}/change/").status_code == 200

    post_action(viewer, "cancel_runs", run.id)
    assert app.get_run(run.id).state == "queued"  # refused: view_run is not enough
    post_action(viewer, "retry_runs", run.id)
    assert app.get_run(run.id).state == "queued"

    assert "Cancel selected runs" in actor.get("/admin/pgqueue/run/").content.decode()
    post_action(actor, "cancel_runs", run.id)
    assert app.get_run(run.id).state == "canceled"


def test_a_run_page_shows_attempt_errors_tracebacks_steps_parent_and_children(
    project_dsn: str,
) -> None:
    from django.test import Client
    from myproj.tasks import app, confirm_order

    import pgqueue

    if FLOW not in app.tasks:

        @app.workflow(name=FLOW, max_attempts=1)
        def flow(ctx: pgqueue.Context) -> None:
            ctx.step("prepare <b>", lambda: 41)
            ctx.sleep("nap", 0)
            ctx.spawn("child", confirm_order, 7)
            raise ValueError("boom <script>")

    client = Client()
    client.force_login(staff("admin", superuser=True))
    parent = app.enqueue(FLOW)
    assert drain(app)["failed"] == 1
    (child,) = [r for r in app.list_runs(task="myproj.tasks.confirm_order") if r.parent_id]

    page = client.get(f"/admin/pgqueue/run/{parent.id}/change/").content.decode()
    assert "ValueError: boom &lt;script&gt;" in page  # escaped
    assert "Traceback (most recent call last)" in page
    assert "prepare &lt;b&gt;" in page and "succeeded" in page  # the step
    assert re.search(r"<td>sleep 0 ms: succeeded after \d+ ms</td>", page)  # what it waited for
    assert f'href="/admin/pgqueue/run/{child.id}/change/"' in page
    child_page = client.get(f"/admin/pgqueue/run/{child.id}/change/").content.decode()
    assert f'href="/admin/pgqueue/run/{parent.id}/change/"' in child_page
