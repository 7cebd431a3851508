"""In Django, the audit log names the Django user who acted (issue 43)."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("django")
if importlib.util.find_spec("django.tasks") is None:
    pytest.importorskip("django_tasks")

from tests.contrib.django.test_django import project_dsn, template
from tests.dashboard.test_django import queued_run, site, user
from tests.helpers import scalar

__all__ = ["project_dsn", "site", "template"]


def test_the_actor_is_the_django_user(site: str) -> None:
    from django.test import Client

    run_id = queued_run(site)
    operator = Client()
    operator.force_login(user("alice", staff=True, act=True))
    operator.get("/ops/pgqueue/")
    headers = {"X-CSRF-Token": operator.cookies["pgqueue_csrf"].value}
    response = operator.post(
        f"/ops/pgqueue/api/runs/{run_id}/cancel",
        data={"reason": "by alice"},
        content_type="application/json",
        headers=headers,
    )
    assert response.json() == {"id": run_id, "canceled": True}
    row = scalar(
        site, "SELECT actor || ':' || reason FROM pgqueue.audit WHERE run_id = %s", (run_id,)
    )
    assert row == "alice:by alice"
