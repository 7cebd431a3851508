"""What peers' dashboards have (issue 43): acting on several selected runs, run now,
delete, editing a queue's limits, emitting an event to a waiting workflow. Each asks
first and is recorded."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

pytest.importorskip("starlette")

from fastapi.testclient import TestClient

from pgqueue.dashboard import asgi
from tests.dashboard.test_confirm import audit, post_form
from tests.dashboard.test_routes import csrf, enqueue
from tests.helpers import run_state as state_of


def test_act_on_selected_runs(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    a, b, c = (enqueue(conn) for _ in range(3))
    page = web.get("/runs?state=queued").text
    assert f'name="ids" value="{a}" form="selected"' in page
    web.get("/")
    body = f"csrf={web.cookies['pgqueue_csrf']}&action=cancel&ids={a}&ids={c}&next=/runs"
    headers = {"Origin": "http://testserver", "content-type": "application/x-www-form-urlencoded"}
    asked = web.post("/api/runs/selected", content=body, headers=headers)
    assert '<strong id="confirm-count">2</strong>' in asked.text
    assert f'name="ids" value="{a},{c}"' in asked.text
    assert state_of(conn, a) == "queued"
    done = post_form(web, "/api/runs/selected", action="cancel", ids=f"{a},{c}", confirmed="yes")
    assert done.status_code == 303
    assert [state_of(conn, i) for i in (a, b, c)] == ["canceled", "queued", "canceled"]
    assert audit(conn)[-1][:2] == ("anonymous", "selected_cancel")
    assert audit(conn)[-1][3:5] == ({"ids": [a, c]}, 2)
    # retry leaves a succeeded run alone; delete takes finished runs only
    ok = enqueue(conn, state="succeeded", finished_at="now")
    headers = csrf(web)
    r = web.post("/api/runs/selected", json={"action": "retry", "ids": [a, ok]}, headers=headers)
    assert r.json() == {"action": "retry", "count": 1}
    assert (state_of(conn, a), state_of(conn, ok)) == ("queued", "succeeded")
    r = web.post("/api/runs/selected", json={"action": "delete", "ids": [ok, b]}, headers=headers)
    assert r.json() == {"action": "delete", "count": 1}
    assert conn.execute("SELECT count(*) FROM pgqueue.runs WHERE id = %s", (ok,)).fetchone() == (0,)
    bad = web.post("/api/runs/selected", json={"action": "drop", "ids": [a]}, headers=headers)
    assert bad.status_code == 400
    bad = web.post("/api/runs/selected", json={"action": "cancel", "ids": 5}, headers=headers)
    assert bad.status_code == 400
    bad = web.post("/api/runs/selected", json={"action": "cancel", "ids": ["²"]}, headers=headers)
    assert bad.status_code == 400
    assert web.get("/runs", params={"q": "²"}).status_code == 200
    many = web.post(
        "/api/runs/selected", json={"action": "cancel", "ids": list(range(1, 600))}, headers=headers
    )
    assert many.status_code == 400


def test_run_now_and_delete(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    later = enqueue(conn, state="scheduled", run_at="2999-01-01 00:00:00+00")
    page = web.get(f"/runs/{later}").text
    assert ">Run now</button>" in page
    asked = post_form(web, f"/api/runs/{later}/run_now")
    assert "instead of at its due time" in asked.text and state_of(conn, later) == "scheduled"
    post_form(web, f"/api/runs/{later}/run_now", confirmed="yes")
    assert state_of(conn, later) == "queued"
    finished = enqueue(conn, state="failed", finished_at="now")
    assert ">Delete this run</button>" in web.get(f"/runs/{finished}").text
    post_form(web, f"/api/runs/{finished}/delete", confirmed="yes", reason="gdpr")
    assert web.get(f"/runs/{finished}").status_code == 404
    # a live run is not deleted
    headers = csrf(web)
    r = web.post(f"/api/runs/{later}/delete", json={}, headers=headers)
    assert r.json() == {"id": later, "delete": False}
    assert [a[1] for a in audit(conn)] == ["run_now", "delete"]


def test_edit_a_queues_limits(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, queue="api")
    assert 'id="limits-form"' in web.get("/queues/api").text
    asked = post_form(
        web, "/api/queues/api/limits", concurrency="5", group_concurrency="", rate_limit="100/m"
    )
    assert "Change the limits of queue api" in asked.text
    assert conn.execute("SELECT count(*) FROM pgqueue.queues").fetchone() == (0,)
    done = post_form(
        web,
        "/api/queues/api/limits",
        concurrency="5",
        group_concurrency="",
        rate_limit="100/m",
        group_rate_limit="",
        confirmed="yes",
    )
    assert done.status_code == 303
    row = conn.execute(
        "SELECT concurrency, group_concurrency, rate_limit, rate_period FROM pgqueue.queues "
        "WHERE name = 'api'"
    ).fetchone()
    assert row == (5, None, 100, 60)
    bad = post_form(web, "/api/queues/api/limits", concurrency="-1", confirmed="yes")
    assert bad.status_code == 400
    bad = post_form(web, "/api/queues/api/limits", rate_limit="fast", confirmed="yes")
    assert bad.status_code == 400
    assert audit(conn)[-1][1] == "limits"


def test_emit_an_event_to_a_waiting_workflow(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    flow = enqueue(
        conn,
        "checkout",
        state="waiting",
        wait_event="order.paid",
        wait_key="42",
        wait_since="2026-01-01 00:00:00+00",
        run_at="9999-12-31 00:00:00+00",
    )
    page = web.get(f"/runs/{flow}").text
    assert 'id="emit-form"' in page
    fields = {"event": "order.paid", "key": "42", "payload": '{"amount": 5}', "run_id": str(flow)}
    asked = post_form(web, "/api/events", **fields)
    assert "Every workflow waiting for it wakes" in asked.text
    assert conn.execute("SELECT count(*) FROM pgqueue.events").fetchone() == (0,)
    post_form(web, "/api/events", confirmed="yes", **fields)
    row = conn.execute("SELECT event, key, payload FROM pgqueue.events").fetchone()
    assert row == ("order.paid", "42", {"amount": 5})
    assert state_of(conn, flow) == "queued"  # woken
    assert audit(conn)[-1][1:4] == ("emit_event", flow, {"event": "order.paid", "key": "42"})
    bad = post_form(web, "/api/events", event="e", payload="{nope", confirmed="yes")
    assert bad.status_code == 400


NEW_ACTIONS = [
    "/api/runs/1/run_now",
    "/api/runs/1/delete",
    "/api/runs/selected",
    "/api/queues/api/limits",
    "/api/events",
]


def test_new_actions_keep_the_csrf_origin_and_read_only_rules(dsn: str) -> None:
    with TestClient(asgi(dsn, upstream_auth=True)) as c:
        c.get("/")
        token = c.cookies["pgqueue_csrf"]
        for url in NEW_ACTIONS:
            no_token = c.post(
                url, data={"confirmed": "yes"}, headers={"Origin": "http://testserver"}
            )
            assert no_token.status_code == 403, url
            evil = c.post(
                url,
                data={"confirmed": "yes", "csrf": token},
                headers={"Origin": "http://evil.example"},
            )
            assert evil.status_code == 403, url
    with TestClient(asgi(dsn, upstream_auth=True, read_only=True)) as c:
        for url in NEW_ACTIONS:
            assert c.post(url, json={}).status_code == 403, url
