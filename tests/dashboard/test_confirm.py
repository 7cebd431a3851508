"""Every action that changes runs, queues or schedules asks first (a confirmation page,
with the exact count for a bulk action; the run's id typed to retry a run that
succeeded), takes an optional reason, and is recorded in pgqueue.audit (issue 43)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

pytest.importorskip("starlette")

from fastapi.testclient import TestClient

from pgqueue.dashboard import asgi
from pgqueue.dashboard.core import CSRF_COOKIE
from tests.dashboard.test_routes import csrf, enqueue
from tests.helpers import run_state as state_of

ORIGIN = {"Origin": "http://testserver"}


def post_form(web: TestClient, url: str, **fields: str) -> Any:
    web.get("/")
    body = {"csrf": web.cookies[CSRF_COOKIE], "next": "/runs", **fields}
    return web.post(url, data=body, headers=ORIGIN, follow_redirects=False)


def audit(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT actor, action, run_id, target, count, reason FROM pgqueue.audit ORDER BY id"
    ).fetchall()


def test_a_cancel_asks_then_acts_with_its_reason(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    run_id = enqueue(conn)
    page = post_form(web, f"/api/runs/{run_id}/cancel", reason="first thought")
    assert page.status_code == 200
    assert f"Cancel run {run_id}" in page.text and 'name="confirmed" value="yes"' in page.text
    assert 'value="first thought"' in page.text  # the reason typed on the run page stays
    assert state_of(conn, run_id) == "queued" and audit(conn) == []
    done = post_form(web, f"/api/runs/{run_id}/cancel", confirmed="yes", reason="dup")
    assert (done.status_code, done.headers["location"]) == (303, "/runs")
    assert state_of(conn, run_id) == "canceled"
    assert audit(conn) == [("anonymous", "cancel", run_id, {}, 1, "dup")]
    run_page = web.get(f"/runs/{run_id}").text
    assert "dup" in run_page and "anonymous" in run_page
    assert "dup" in web.get("/audit").text
    assert web.get("/api/audit").json()["actions"][0]["action"] == "cancel"


def test_a_confirmed_form_still_needs_its_csrf_token(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    run_id = enqueue(conn)
    r = web.post(
        f"/api/runs/{run_id}/cancel",
        data={"confirmed": "yes", "next": "/"},
        headers=ORIGIN,
        follow_redirects=False,
    )
    assert r.status_code == 403
    r = post_form(web, f"/api/runs/{run_id}/cancel", confirmed="yes")
    assert r.status_code == 303
    evil = {"Origin": "http://evil.example"}
    r = web.post(
        f"/api/runs/{run_id}/retry",
        data={"confirmed": "yes", "csrf": web.cookies[CSRF_COOKIE]},
        headers=evil,
    )
    assert r.status_code == 403 and state_of(conn, run_id) == "canceled"


def test_retrying_a_succeeded_run_needs_its_id_typed(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    run_id = enqueue(conn, "charge", state="succeeded", finished_at="now")
    page = post_form(web, f"/api/runs/{run_id}/retry")
    assert "runs its task again" in page.text and 'name="typed"' in page.text
    wrong = post_form(web, f"/api/runs/{run_id}/retry", confirmed="yes", typed="0")
    assert wrong.status_code == 200 and "the id typed is not this run" in wrong.text
    assert state_of(conn, run_id) == "succeeded"
    right = post_form(web, f"/api/runs/{run_id}/retry", confirmed="yes", typed=str(run_id))
    assert right.status_code == 303 and state_of(conn, run_id) == "queued"

    # a script says so in its body
    other = enqueue(conn, "charge", state="succeeded", finished_at="now")
    headers = csrf(web)
    refused = web.post(f"/api/runs/{other}/retry", json={}, headers=headers)
    assert refused.status_code == 409 and "rerun_succeeded" in refused.text
    ok = web.post(f"/api/runs/{other}/retry", json={"rerun_succeeded": True}, headers=headers)
    assert ok.json() == {"id": other, "retried": True}
    # a failed run needs neither
    failed = enqueue(conn, "charge", state="failed", finished_at="now")
    assert web.post(f"/api/runs/{failed}/retry", headers=headers).json()["retried"] is True


def test_a_bulk_action_shows_the_exact_count_first(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue) SELECT 't', 'mail' FROM generate_series(1, 12);"
        "INSERT INTO pgqueue.runs (task, queue) SELECT 't', 'other' FROM generate_series(1, 5)"
    )
    page = post_form(web, "/api/runs/bulk", action="cancel", state="queued", queue="mail")
    assert page.status_code == 200
    assert '<strong id="confirm-count">12</strong>' in page.text
    queued = "SELECT count(*) FROM pgqueue.runs WHERE state = 'queued'"
    assert conn.execute(queued).fetchone() == (17,)
    done = post_form(
        web,
        "/api/runs/bulk",
        action="cancel",
        state="queued",
        queue="mail",
        confirmed="yes",
        reason="mail outage",
    )
    assert done.status_code == 303
    assert conn.execute(queued).fetchone() == (5,)
    reasons = conn.execute(
        "SELECT DISTINCT cancel_reason FROM pgqueue.runs WHERE state = 'canceled'"
    ).fetchall()
    assert reasons == [("mail outage",)]
    target = {"state": "queued", "queue": "mail"}
    assert audit(conn) == [("anonymous", "bulk_cancel", None, target, 12, "mail outage")]
    # the page a link opens (the Failures page's retries) says the same
    conn.execute(
        "INSERT INTO pgqueue.runs (task, state, finished_at) "
        "SELECT 'send', 'failed', now() FROM generate_series(1, 3)"
    )
    linked = web.get("/confirm?action=retry&state=failed&task=send")
    assert '<strong id="confirm-count">3</strong>' in linked.text
    assert web.get("/confirm?action=drop").status_code == 400


def test_queue_and_schedule_actions_ask_and_are_recorded(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    conn.execute(
        "INSERT INTO pgqueue.schedules (name, cron, task, next_fire_at) "
        "VALUES ('nightly', '0 3 * * *', 'report', now() + interval '1 hour')"
    )
    page = post_form(web, "/api/queues/mail/pause")
    assert "Pause queue mail" in page.text
    paused = "SELECT coalesce(bool_or(paused), false) FROM pgqueue.queues WHERE name = 'mail'"
    assert conn.execute(paused).fetchone() == (False,)
    post_form(web, "/api/queues/mail/pause", confirmed="yes", reason="deploy")
    assert conn.execute(paused).fetchone() == (True,)
    assert "Run schedule nightly" in post_form(web, "/api/schedules/nightly/trigger").text
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (0,)
    post_form(web, "/api/schedules/nightly/trigger", confirmed="yes")
    row = conn.execute("SELECT id FROM pgqueue.runs").fetchone()
    assert row is not None
    assert audit(conn) == [
        ("anonymous", "pause", None, {"queue": "mail"}, 1, "deploy"),
        ("anonymous", "schedule_trigger", row[0], {"schedule": "nightly"}, 1, None),
    ]


def test_the_actor_is_the_token_when_there_is_one(dsn: str, conn: psycopg.Connection[Any]) -> None:
    run_id = enqueue(conn)
    with TestClient(asgi(dsn, token="s3cret")) as c:
        r = c.post(
            f"/api/runs/{run_id}/cancel",
            json={"reason": "script"},
            headers={"Authorization": "Bearer s3cret"},
        )
        assert r.json()["canceled"] is True
    assert audit(conn) == [("token", "cancel", run_id, {}, 1, "script")]


def test_a_read_only_dashboard_has_no_confirmation_page(dsn: str) -> None:
    with TestClient(asgi(dsn, upstream_auth=True, read_only=True)) as c:
        assert c.get("/confirm?action=retry&state=failed").status_code == 403
