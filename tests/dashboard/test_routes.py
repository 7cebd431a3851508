"""The dashboard over HTTP (docs/dashboard.md): every route, action, auth and read-only rule, and
the "why is it not running" text for each cause, against a real database through
Starlette's test client."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

pytest.importorskip("starlette")
pytest.importorskip("httpx2")

from fastapi import FastAPI
from fastapi.testclient import TestClient

import pgqueue
from pgqueue.dashboard import asgi
from pgqueue.dashboard.core import CSRF_COOKIE
from tests.helpers import ROOT, run_state

WORKER = "00000000-0000-0000-0000-0000000000aa"


def client(target: Any, **options: Any) -> TestClient:
    """The dashboard in a test client; without a token, as a mount whose host app
    authenticates (upstream_auth)."""
    if not options.get("token"):
        options.setdefault("upstream_auth", True)
    return TestClient(asgi(target, **options))


@pytest.fixture
def web(dsn: str) -> Iterator[TestClient]:
    with client(dsn) as c:
        yield c


def csrf(c: TestClient, page: str = "/") -> dict[str, str]:
    """The headers a page's script sends with a POST: its CSRF token, its own origin."""
    assert c.get(page).status_code == 200
    return {"X-CSRF-Token": c.cookies[CSRF_COOKIE], "Origin": "http://testserver"}


def enqueue(conn: psycopg.Connection[Any], task: str = "t", **kw: Any) -> int:
    cols = {"task": task, **kw}
    names = ", ".join(cols)
    marks = ", ".join(f"%({k})s" for k in cols)
    row = conn.execute(
        f"INSERT INTO pgqueue.runs ({names}) VALUES ({marks}) RETURNING id", cols
    ).fetchone()
    assert row is not None
    return int(row[0])


def running(conn: psycopg.Connection[Any], queue: str, group: str = "") -> int:
    return enqueue(
        conn,
        queue=queue,
        group_key=group,
        state="running",
        attempt=1,
        worker_id=WORKER,
        lease_token="00000000-0000-0000-0000-000000000001",
        lease_expires_at="infinity",
        started_at="now",
    )


def live_worker(conn: psycopg.Connection[Any], queues: list[str], concurrency: int = 10) -> None:
    conn.execute(
        "INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version) "
        "VALUES (%s, 'host-a', 4242, %s, %s, 'test')",
        (WORKER, queues, concurrency),
    )


def why(web: TestClient, run_id: int) -> list[str]:
    body = web.get(f"/api/runs/{run_id}").json()
    return list(body["why"])


# -- pages and endpoints ---------------------------------------------------------------


def test_every_page_and_endpoint_answers(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    parent = enqueue(conn, "flow", queue="mail", state="waiting", wait_run_id=None)
    child = enqueue(conn, "step", queue="mail", parent_id=parent)
    failed = enqueue(conn, "boom", state="failed", finished_at="now", error="ValueError: no")
    conn.execute(
        "INSERT INTO pgqueue.run_errors (run_id, attempt, kind, message, traceback) "
        "VALUES (%s, 1, 'error', 'ValueError: no', 'Traceback (most recent call last):\n  x')",
        (failed,),
    )
    conn.execute(
        "INSERT INTO pgqueue.steps (run_id, name, state, attempt, started_at, finished_at) "
        "VALUES (%s, 'fetch', 'succeeded', 1, now() - interval '2 s', now() - interval '1 s')",
        (parent,),
    )
    conn.execute(
        "INSERT INTO pgqueue.schedules (name, cron, task, next_fire_at) "
        "VALUES ('nightly', '0 3 * * *', 'report', now() + interval '1 hour')"
    )
    live_worker(conn, ["mail"])

    pages = ["/", "/runs", "/runs?state=failed", f"/runs/{parent}", "/queues/mail", "/workers"]
    for page in [*pages, "/schedules", "/parts/overview"]:
        r = web.get(page)
        assert r.status_code == 200, (page, r.text[:200])
        assert r.headers["content-type"].startswith("text/html")

    queues = web.get("/api/queues").json()
    mail = next(q for q in queues["queues"] if q["queue"] == "mail")
    assert (mail["queued"], mail["waiting"], mail["live_workers"]) == (1, 1, 1)
    assert {"finished_last_minute", "oldest_queued_seconds", "concurrency", "paused"} <= set(mail)
    assert any(m["failed"] == 1 for m in queues["throughput"])

    runs = web.get("/api/runs").json()
    assert [r["id"] for r in runs["runs"]] == [failed, child, parent]
    assert runs["next"] is None

    detail = web.get(f"/api/runs/{parent}").json()
    assert [c["id"] for c in detail["children"]] == [child]
    assert [s["name"] for s in detail["steps"]] == ["fetch"]
    assert web.get(f"/api/runs/{child}").json()["parent"]["id"] == parent
    errors = web.get(f"/api/runs/{failed}").json()["errors"]
    assert errors[0]["traceback"].startswith("Traceback")
    page = web.get(f"/runs/{failed}").text
    assert "Traceback (most recent call last):" in page

    queue = web.get("/api/queues/mail").json()
    assert queue["groups"][0]["queued"] == 1 and queue["workers"][0]["pid"] == 4242
    assert web.get("/api/workers").json()["workers"][0]["host"] == "host-a"
    assert web.get("/api/schedules").json()["schedules"][0]["name"] == "nightly"

    assert web.get("/api/runs/99999").status_code == 404
    assert web.get("/api/queues/nowhere").status_code == 404
    assert web.get("/runs/99999").status_code == 404
    assert web.get("/api/runs?state=bogus").status_code == 400
    assert web.get("/api/runs?cursor=zzz").status_code == 400
    assert web.get("/static/dashboard.js").headers["content-type"].startswith("text/javascript")
    assert web.get("/static/../core.py").status_code == 404
    assert web.get("/nowhere").status_code == 404
    assert web.post("/api/queues", headers=csrf(web)).status_code == 405


def test_runs_are_filtered_and_paged_by_keyset(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, group_key) "
        "SELECT 'a', 'q' || (i % 2), 'g' || (i % 3) FROM generate_series(1, 130) i"
    )
    conn.execute(
        "INSERT INTO pgqueue.runs (task, state, finished_at, error) "
        "SELECT 'b', 'failed', now() - i * interval '1 s', 'KeyError: ' || i "
        "FROM generate_series(1, 70) i"
    )
    seen: list[int] = []
    cursor = None
    while True:
        params = {"queue": "q1", "cursor": cursor} if cursor else {"queue": "q1"}
        page = web.get("/api/runs", params=params).json()
        seen += [r["id"] for r in page["runs"]]
        assert all(r["queue"] == "q1" for r in page["runs"])
        cursor = page["next"]
        if cursor is None:
            break
    assert len(seen) == 65 and seen == sorted(seen, reverse=True)

    failed: list[int] = []
    cursor = None
    while True:
        params = {"state": "failed", "limit": "30", **({"cursor": cursor} if cursor else {})}
        page = web.get("/api/runs", params=params).json()
        failed += [r["id"] for r in page["runs"]]
        cursor = page["next"]
        if cursor is None:
            break
    # most recently finished first: the runs finished 1 s ago, 2 s ago...
    assert len(failed) == 70 and failed == sorted(failed)

    assert len(web.get("/api/runs", params={"task": "a", "group": "g1"}).json()["runs"]) == 44
    hits = web.get("/api/runs", params={"q": "keyerror: 7"}).json()["runs"]
    assert sorted(r["error"] for r in hits) == ["KeyError: 7", "KeyError: 70"]
    html = web.get("/runs", params={"state": "queued", "queue": "q0"}).text
    assert 'id="next"' in html and "Cancel every queued run" in html


# -- actions ---------------------------------------------------------------------------


def test_run_actions_change_the_database(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    headers = csrf(web)
    queued = enqueue(conn)
    r = web.post(f"/api/runs/{queued}/cancel", headers=headers)
    assert r.json() == {"id": queued, "canceled": True}
    assert run_state(conn, queued) == "canceled"
    assert web.post(f"/api/runs/{queued}/cancel", headers=headers).json()["canceled"] is False
    assert web.post(f"/api/runs/{queued}/retry", headers=headers).json()["retried"] is True
    assert run_state(conn, queued) == "queued"
    assert web.post("/api/runs/99999/cancel", headers=headers).status_code == 404

    # a form post (no script) goes back to the page it came from
    form = {"csrf": web.cookies[CSRF_COOKIE], "next": f"/runs/{queued}", "confirmed": "yes"}
    r = web.post(
        f"/api/runs/{queued}/cancel",
        data=form,
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert (r.status_code, r.headers["location"]) == (303, f"/runs/{queued}")
    assert run_state(conn, queued) == "canceled"


def test_bulk_actions_count_first_then_act(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    headers = csrf(web)
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, state, finished_at) "
        "SELECT 't', 'mail', 'failed', now() FROM generate_series(1, 12)"
    )
    fill = "INSERT INTO pgqueue.runs (task, queue) SELECT 't', %s FROM generate_series(1, %s)"
    conn.execute(fill, ("mail", 5))
    conn.execute(fill, ("web", 3))
    count = web.get("/api/runs/count", params={"action": "retry", "state": "failed"}).json()
    assert count == {"count": 12}
    body = {"action": "retry", "filter": {"state": "failed", "queue": "mail"}}
    assert web.post("/api/runs/bulk", json=body, headers=headers).json()["count"] == 12
    failed = conn.execute("SELECT count(*) FROM pgqueue.runs WHERE state = 'failed'").fetchone()
    assert failed == (0,)

    body = {"action": "cancel", "filter": {"queue": "web"}}
    assert web.post("/api/runs/bulk", json=body, headers=headers).json()["count"] == 3
    left = conn.execute("SELECT count(*) FROM pgqueue.runs WHERE state = 'queued'").fetchone()
    assert left == (17,)

    bad = {"action": "retry", "filter": {"state": "queued"}}
    assert web.post("/api/runs/bulk", json=bad, headers=headers).status_code == 400
    bad = {"action": "explode", "filter": {}}
    assert web.post("/api/runs/bulk", json=bad, headers=headers).status_code == 400


def test_queue_and_schedule_actions(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    headers = csrf(web)
    enqueue(conn, queue="mail")
    assert web.post("/api/queues/mail/pause", headers=headers).json()["paused"] is True
    paused = "SELECT paused FROM pgqueue.queues WHERE name = 'mail'"
    assert conn.execute(paused).fetchone() == (True,)
    assert "paused" in web.get("/queues/mail").text
    web.post("/api/queues/mail/resume", headers=headers)
    assert conn.execute(paused).fetchone() == (False,)

    conn.execute(
        "INSERT INTO pgqueue.schedules (name, cron, task, queue, next_fire_at) "
        "VALUES ('nightly', '0 3 * * *', 'report', 'reports', now() + interval '1 hour')"
    )
    run_id = web.post("/api/schedules/nightly/trigger", headers=headers).json()["run_id"]
    assert conn.execute(
        "SELECT task, queue FROM pgqueue.runs WHERE id = %s", (run_id,)
    ).fetchone() == ("report", "reports")
    web.post("/api/schedules/nightly/pause", headers=headers)
    paused = "SELECT paused FROM pgqueue.schedules WHERE name = 'nightly'"
    assert conn.execute(paused).fetchone() == (True,)
    web.post("/api/schedules/nightly/resume", headers=headers)
    assert conn.execute(paused).fetchone() == (False,)
    assert web.post("/api/schedules/nope/trigger", headers=headers).status_code == 404


# -- auth, CSRF, read-only -------------------------------------------------------------


def test_a_post_without_csrf_token_is_refused(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    run_id = enqueue(conn)
    good = csrf(web)
    evil = {"Origin": "https://evil.example"}
    # another origin's form: the browser sends the cookies but cannot know the token
    r = web.post(f"/api/runs/{run_id}/cancel", data={"next": "/"}, headers=evil)
    assert r.status_code == 403 and "cross-origin" in r.json()["error"]
    # even with the token, another Origin is refused
    r = web.post(f"/api/runs/{run_id}/cancel", headers={**good, **evil})
    assert r.status_code == 403
    # same origin, no token
    r = web.post(f"/api/runs/{run_id}/cancel", headers={"Origin": "http://testserver"})
    assert r.status_code == 403 and "CSRF" in r.json()["error"]
    r = web.post(f"/api/runs/{run_id}/cancel", headers={**good, "X-CSRF-Token": "guess"})
    assert r.status_code == 403
    assert run_state(conn, run_id) == "queued"
    assert web.post(f"/api/runs/{run_id}/cancel", headers=good).status_code == 200


def test_a_token_protected_dashboard_answers_401_without_it(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    run_id = enqueue(conn)
    with client(dsn, token="s3cret") as c:
        for path in ("/api/queues", "/api/runs", f"/api/runs/{run_id}", "/api/workers"):
            r = c.get(path)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert c.get("/").status_code == 401  # the login form
        assert c.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post(f"/api/runs/{run_id}/cancel").status_code == 401
        assert run_state(conn, run_id) == "queued"

        bearer = {"Authorization": "Bearer s3cret"}
        assert c.get("/api/queues", headers=bearer).status_code == 200
        # a script with the token needs no CSRF token
        assert c.post(f"/api/runs/{run_id}/cancel", headers=bearer).json()["canceled"] is True

        # a browser signs in once; its cookie is an HMAC, not the token
        assert c.post("/login", data={"token": "nope"}).status_code == 401
        r = c.post("/login", data={"token": "s3cret"}, follow_redirects=False)
        assert r.status_code == 303 and "s3cret" not in r.headers["set-cookie"]
        assert c.get("/runs").status_code == 200
        assert c.get("/api/runs").status_code == 200


def test_read_only_refuses_every_action(dsn: str, conn: psycopg.Connection[Any]) -> None:
    run_id = enqueue(conn, queue="mail")
    conn.execute(
        "INSERT INTO pgqueue.schedules (name, cron, task, next_fire_at) "
        "VALUES ('nightly', '0 3 * * *', 'report', now() + interval '1 hour')"
    )
    with client(dsn, read_only=True, token="t") as c:
        bearer = {"Authorization": "Bearer t"}
        posts = [
            f"/api/runs/{run_id}/cancel",
            f"/api/runs/{run_id}/retry",
            "/api/runs/bulk",
            "/api/queues/mail/pause",
            "/api/queues/mail/resume",
            "/api/schedules/nightly/trigger",
            "/api/schedules/nightly/pause",
            "/api/schedules/nightly/resume",
        ]
        for path in posts:
            r = c.post(path, headers=bearer, json={"action": "cancel", "filter": {}})
            assert r.status_code == 403, path
        assert c.get("/api/runs", headers=bearer).status_code == 200
        page = c.get(f"/runs/{run_id}", headers=bearer).text
        assert "read-only" in page and "Cancel this run" not in page
    assert run_state(conn, run_id) == "queued"
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (1,)


def test_the_command_refuses_a_public_bind_without_a_token(dsn: str) -> None:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "pgqueue", "dashboard", "--dsn", dsn, "--host", "0.0.0.0"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "without a token" in out.stderr


def test_mounted_under_a_prefix_in_fastapi(dsn: str, conn: psycopg.Connection[Any]) -> None:
    run_id = enqueue(conn)
    api = FastAPI()
    app = pgqueue.App(dsn)
    api.mount("/ops/pgqueue", asgi(app, upstream_auth=True))
    with TestClient(api) as c:
        page = c.get("/ops/pgqueue/runs").text
        assert f'href="/ops/pgqueue/runs/{run_id}"' in page
        assert 'src="/ops/pgqueue/static/dashboard.js"' in page
        assert c.get("/ops/pgqueue/static/dashboard.css").status_code == 200
        headers = {"X-CSRF-Token": c.cookies[CSRF_COOKIE], "Origin": "http://testserver"}
        assert c.post(f"/ops/pgqueue/api/runs/{run_id}/cancel", headers=headers).status_code == 200
    assert run_state(conn, run_id) == "canceled"
    app.close()


# -- why a run is not running ----------------------------------------------------------


def test_why_scheduled_paused_and_no_worker(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    later = enqueue(conn, queue="mail", state="scheduled", run_at="2999-01-01 14:02:00+00")
    assert why(web, later)[0] == "scheduled until 2999-01-01 14:02 UTC"
    assert why(web, later)[1] == "no live worker serves queue mail"

    backoff = enqueue(
        conn,
        queue="mail",
        state="scheduled",
        run_at="2999-01-01 14:02:00+00",
        attempt=2,
        error="TimeoutError",
    )
    assert why(web, backoff)[0].endswith("(retrying after attempt 2 failed)")
    due = enqueue(conn, queue="mail", state="scheduled", run_at="2000-01-01 00:00:00+00")
    assert why(web, due)[0] == "due since 2000-01-01 00:00 UTC: a worker's stager queues it"

    live_worker(conn, ["mail"])
    queued = enqueue(conn, queue="mail")
    assert why(web, queued) == ["next in line: a worker claims it at its next claim"]
    web.post("/api/queues/mail/pause", headers=csrf(web))
    assert why(web, queued) == ["queue mail is paused"]
    assert "queue mail is paused" in web.get(f"/runs/{queued}").text
    assert "queue mail is paused" in web.get("/runs?state=queued").text


def test_why_queue_and_group_limits(
    web: TestClient, app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    live_worker(conn, ["crawl", "mail"], concurrency=50)
    app.set_limits("crawl", concurrency=3, group_concurrency=None)
    holders = [running(conn, "crawl") for _ in range(3)]
    waiting = enqueue(conn, queue="crawl", limited=True)
    text = ", ".join(str(i) for i in holders)
    assert why(web, waiting) == [f"queue limit 3 of 3 taken by runs {text}"]

    app.set_limits("mail", concurrency=None, group_concurrency=1)
    holder = running(conn, "mail", "tenant-7")
    blocked = enqueue(conn, queue="mail", group_key="tenant-7", limited=True)
    free = enqueue(conn, queue="mail", group_key="tenant-8", limited=True)
    assert why(web, blocked) == [f"group tenant-7 at its limit (1 of 1: run {holder})"]
    assert why(web, free) == ["next in line: a worker claims it at its next claim"]
    groups = {g["group_key"]: g for g in web.get("/api/queues/mail").json()["groups"]}
    assert groups["tenant-7"]["holders"] == [holder] and groups["tenant-8"]["queued"] == 1


def test_why_counts_the_permit_of_a_canceled_attempt_whose_code_runs_on(
    web: TestClient, app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """A canceled run's attempt keeps its permit while its worker runs its code
    (pgqueue.zombie_permits): the claim counts it, and so does the explanation."""
    live_worker(conn, ["mail"], concurrency=50)
    app.set_limits("mail", concurrency=None, group_concurrency=1)
    holder = running(conn, "mail", "tenant-7")
    conn.execute("UPDATE pgqueue.runs SET limited = true WHERE id = %s", (holder,))
    conn.execute("SELECT pgqueue.cancel(%s)", (holder,))
    blocked = enqueue(conn, queue="mail", group_key="tenant-7", limited=True)
    assert why(web, blocked) == [f"group tenant-7 at its limit (1 of 1: run {holder})"]
    conn.execute("DELETE FROM pgqueue.zombie_permits")  # its code ended
    assert why(web, blocked) == ["next in line: a worker claims it at its next claim"]


def test_why_busy_workers_and_runs_ahead(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    live_worker(conn, ["mail"], concurrency=1)
    first = enqueue(conn, queue="mail")
    second = enqueue(conn, queue="mail")
    assert why(web, second) == ["1 run ahead of it in queue mail"]
    assert why(web, first) == ["next in line: a worker claims it at its next claim"]
    running(conn, "mail")
    assert why(web, first) == ["every live worker serving queue mail is busy (1 of 1 slots)"]


def test_why_waiting_for_an_event_or_a_child(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    live_worker(conn, ["default"])
    event = enqueue(
        conn,
        state="waiting",
        wait_event="order.paid",
        wait_key="42",
        wait_since="now",
        run_at="2999-01-01 14:05:00+00",
    )
    deadline = "(deadline 2999-01-01 14:05 UTC)"
    assert why(web, event) == [f"waiting for event order.paid key 42 {deadline}"]
    late = enqueue(
        conn, state="waiting", wait_event="e", wait_key="", run_at="2000-01-01 00:00:00+00"
    )
    assert why(web, late) == [
        "waiting for event e (deadline 2000-01-01 00:00 UTC passed: a worker's stager wakes it)"
    ]
    child = enqueue(conn, "charge", state="queued")
    parent = enqueue(conn, state="waiting", wait_run_id=child, run_at="9999-12-31 00:00:00+00")
    conn.execute("UPDATE pgqueue.runs SET parent_id = %s WHERE id = %s", (parent, child))
    assert why(web, parent) == [f"waiting for child {child} (charge, queued) (no deadline)"]
    detail = web.get(f"/api/runs/{parent}").json()
    assert detail["waits_for"] == {"child": child, "deadline": None}
    assert re.search(rf'href="/runs/{child}"', web.get(f"/runs/{parent}").text)


def test_a_read_only_dashboard_needs_only_select(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """docs/dashboard.md: USAGE on the schema and SELECT on its tables are enough."""
    from psycopg.conninfo import make_conninfo

    role = f"pgqueue_dash_ro_{os.getpid()}"
    run_id = enqueue(conn, queue="mail", state="failed", finished_at="now")
    conn.execute(f"DROP ROLE IF EXISTS {role}")
    conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        conn.execute(f"GRANT USAGE ON SCHEMA pgqueue TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA pgqueue TO {role}")
        with client(make_conninfo(dsn, user=role, password=None), read_only=True) as c:
            pages = ["/", "/runs", f"/runs/{run_id}", "/queues/mail", "/workers", "/schedules"]
            for path in pages:
                assert c.get(path).status_code == 200, path
            assert c.get("/api/runs", params={"state": "failed"}).json()["runs"][0]["id"] == run_id
    finally:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")


def test_the_wheel_carries_the_templates_and_static_files(tmp_path: Any) -> None:
    """No asset is fetched at run time: every template, stylesheet and script ships."""
    import zipfile

    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
    )
    (wheel,) = tmp_path.glob("pgqueue_jobs-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    source = ROOT / "pgqueue" / "dashboard"
    assets = [p for d in ("templates", "static") for p in (source / d).iterdir()]
    assert assets
    for path in assets:
        assert f"pgqueue/dashboard/{path.parent.name}/{path.name}" in shipped, path.name
    assert {f"pgqueue/sql/{p.name}" for p in (ROOT / "sql").glob("dashboard_*.sql")} <= shipped


def test_names_from_the_database_are_escaped(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    """Task, queue and group names, arguments and errors are data, never markup."""
    evil = "<script>alert(1)</script>"
    run_id = enqueue(
        conn,
        evil,
        queue=evil,
        group_key=evil,
        state="failed",
        finished_at="now",
        error=evil,
        args=f'["{evil}"]',
    )
    pages = ["/", "/parts/overview", "/runs", f"/runs/{run_id}", "/runs?state=failed"]
    for page in pages:
        body = web.get(page).text
        assert evil not in body, page
        assert "&lt;script&gt;" in body, page
    assert web.get("/api/queues/" + evil.replace("/", "%2F")).status_code == 200


def test_a_database_without_the_schema_answers_503(dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("DROP SCHEMA pgqueue CASCADE")
    with client(dsn) as c:
        r = c.get("/api/queues")
        assert r.status_code == 503 and "pgqueue migrate" in r.json()["error"]
        assert c.get("/").status_code == 503


def test_behind_a_proxy_with_a_path_prefix(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """`pgqueue dashboard --root-path /pgq` (uvicorn's root_path): links and cookies carry
    the prefix whether or not the proxy strips it from the path."""
    run_id = enqueue(conn)
    with TestClient(asgi(dsn, upstream_auth=True), root_path="/pgq") as c:
        first = c.get("/runs")
        assert "Path=/pgq;" in first.headers["set-cookie"]
        for path in ("/runs", "/pgq/runs"):
            r = c.get(path)
            assert r.status_code == 200, path
            assert f'href="/pgq/runs/{run_id}"' in r.text


def test_the_run_page_says_what_each_finished_wait_was_for(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    flow = enqueue(conn, "flow", state="succeeded", finished_at="now")
    child = enqueue(conn, "charge", state="succeeded", finished_at="now", parent_id=flow)
    steps = [
        ("paid", {"event": "order.paid", "key": "42", "timeout": None}, "0 s", "3 s"),
        ("late", {"event": "refund", "key": None, "timeout": 60}, "0 s", "75 s"),
        ("charge", {"run_id": child}, "0 s", "2 s"),
        ("cooldown", {"seconds": 30}, "0 s", "30 s"),
    ]
    for name, waited, start, end in steps:
        conn.execute(
            "INSERT INTO pgqueue.steps (run_id, name, state, attempt, output, waited, created_at,"
            " finished_at) VALUES (%s, %s, 'succeeded', 1, 'null', %s,"
            " now() - interval '100 s' + %s::interval, now() - interval '100 s' + %s::interval)",
            (flow, name, Jsonb(waited), start, end),
        )
    page = web.get(f"/runs/{flow}").text
    assert "event order.paid key 42: received after 3.0 s" in page
    assert "event refund: timed out after 75.0 s" in page
    assert re.search(rf'<a href="/runs/{child}">child run {child}: succeeded after 2.0 s</a>', page)
    assert "sleep 30.0 s: succeeded after 30.0 s" in page
    detail = web.get(f"/api/runs/{flow}").json()
    assert {s["name"]: s["waited"] for s in detail["steps"]} == {n: w for n, w, _, _ in steps}


def test_queue_page_shows_rate_limits_and_their_use(
    web: TestClient, app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """A queue's page and its JSON show its rate limits and the starts they count now:
    three runs claimed (pgqueue.claim_limited) of a 5/s queue, per group 2/m."""
    app.set_limits(
        "api", concurrency=None, group_concurrency=None, rate_limit="5/s", group_rate_limit="2/m"
    )
    for g in ("t1", "t1", "t2", "t2", "t2"):
        enqueue(conn, queue="api", group_key=g, limited=True)
    claimed = conn.execute(
        "SELECT id FROM pgqueue.claim_limited('api', %s, 10, 30)", (WORKER,)
    ).fetchall()
    assert len(claimed) == 4  # 2 per group in the minute
    body = web.get("/api/queues/api").json()
    assert (body["rate_limit"], body["rate_used"], body["group_rate_limit"]) == ("5/s", 4, "2/m")
    assert {g["group_key"]: g["rate_used"] for g in body["groups"]} == {"t1": 2, "t2": 2}
    page = web.get("/queues/api").text
    assert "5/s" in page and "(4 used)" in page and "Starts (2/m)" in page


def test_why_rate_limits_and_ordered_groups(
    web: TestClient, app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """A queued run held back by its queue's rate limit, its group's, or an earlier run of
    its ordered group says so."""
    live_worker(conn, ["api", "feed"], concurrency=50)
    app.set_limits("api", concurrency=None, group_concurrency=None, rate_limit="2/h")
    for _ in range(3):
        enqueue(conn, queue="api", limited=True)
    conn.execute("SELECT id FROM pgqueue.claim_limited('api', %s, 10, 30)", (WORKER,))
    row = conn.execute("SELECT id FROM pgqueue.runs WHERE state = 'queued'").fetchone()
    assert row is not None
    held = int(row[0])
    (reason,) = why(web, held)
    assert reason.startswith("queue rate limit 2/h reached (2 starts in the last hour): next")
    app.set_limits(
        "api", concurrency=None, group_concurrency=None, rate_limit=None, group_rate_limit="1/m"
    )
    enqueue(conn, queue="api", group_key="t9", limited=True)
    conn.execute("SELECT id FROM pgqueue.claim_limited('api', %s, 10, 30)", (WORKER,))
    second = enqueue(conn, queue="api", group_key="t9", limited=True)
    assert why(web, second) == ["group t9 at its rate limit 1/m (1 start in the last minute)"]
    app.set_limits("feed", concurrency=None, group_concurrency=1, ordered=True)
    first = enqueue(
        conn,
        queue="feed",
        group_key="acct",
        state="scheduled",
        limited=True,
        run_at="9999-12-31 00:00:00+00",
    )
    later = enqueue(conn, queue="feed", group_key="acct", limited=True)
    assert why(web, later) == [f"ordered group acct: waits for run {first} to finish"]


def test_the_run_page_shows_progress_and_the_cancel_reason(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    run_id = running(conn, "default")
    progress = {"done": 40, "total": 200, "message": "page 40", "at": "2026-01-01"}
    conn.execute(
        "UPDATE pgqueue.runs SET progress = %s, lease_expires_at = now() + interval '1 hour' "
        "WHERE id = %s",
        (Jsonb(progress), run_id),
    )
    page = web.get(f"/runs/{run_id}").text
    assert re.search(r'id="progress".*40.* of 200.*page 40', page)
    assert web.get(f"/api/runs/{run_id}").json()["progress"]["message"] == "page 40"
    headers = csrf(web, f"/runs/{run_id}")
    done = web.post(
        f"/api/runs/{run_id}/cancel", json={"reason": "operator <b>stop</b>"}, headers=headers
    )
    assert done.json() == {"id": run_id, "canceled": True}
    page = web.get(f"/runs/{run_id}").text
    assert "operator &lt;b&gt;stop&lt;/b&gt;" in page and 'id="cancel-reason"' in page
    assert web.get(f"/api/runs/{run_id}").json()["cancel_reason"] == "operator <b>stop</b>"


def test_the_cancel_form_sends_a_reason(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    run_id = enqueue(conn)
    page = web.get(f"/runs/{run_id}").text
    assert 'name="reason"' in page
    form = {
        "csrf": web.cookies[CSRF_COOKIE],
        "next": f"/runs/{run_id}",
        "reason": "by form",
        "confirmed": "yes",
    }
    r = web.post(
        f"/api/runs/{run_id}/cancel",
        data=form,
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    assert web.get(f"/api/runs/{run_id}").json()["cancel_reason"] == "by form"
    other = enqueue(conn)
    bad = web.post(f"/api/runs/{other}/cancel", json={"reason": 5}, headers=csrf(web))
    assert bad.status_code == 400 and "reason must be a string" in bad.text


def batch_of(conn: psycopg.Connection[Any], n: int, task: str = "report") -> tuple[int, list[int]]:
    """A sealed batch of n queued members (the rows app.batch() writes)."""
    row = conn.execute(
        "INSERT INTO pgqueue.batch_heads (on_complete, queue, total, sealed_at, kwargs)"
        " VALUES (%s, 'reports', %s, now(), '{\"tag\": \"nightly\"}') RETURNING id",
        (task, n),
    ).fetchone()
    assert row is not None
    members = [enqueue(conn, "thumb", queue="media", batch_id=row[0]) for _ in range(n)]
    return int(row[0]), members


def test_batches_list_page_and_members(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    older, _ = batch_of(conn, 1, task="older")
    batch, members = batch_of(conn, 5)
    conn.execute(  # the counting trigger runs as for a worker's completions
        "UPDATE pgqueue.runs SET state = s, finished_at = now(), error = e"
        " FROM (VALUES (%s, 'succeeded', NULL), (%s, 'failed', 'ValueError: bad'),"
        " (%s, 'canceled', NULL)) AS v(id, s, e) WHERE runs.id = v.id::bigint",
        members[:3],
    )
    listed = web.get("/api/batches").json()
    assert [b["id"] for b in listed["batches"]] == [batch, older] and listed["next"] is None
    first = listed["batches"][0]
    assert (first["on_complete"], first["total"], first["finished"]) == ("report", 5, 3)
    assert (first["succeeded"], first["failed"], first["canceled"]) == (1, 1, 1)
    assert first["progress"] == 60.0 and first["callback_run_id"] is None
    paged = web.get("/api/batches?limit=1").json()
    assert [b["id"] for b in paged["batches"]] == [batch]
    rest = web.get(f"/api/batches?limit=1&cursor={paged['next']}").json()
    assert [b["id"] for b in rest["batches"]] == [older]

    page = web.get("/batches").text
    assert f'href="/batches/{batch}"' in page and "60%" in page and "not yet" in page

    one = web.get(f"/api/batches/{batch}?limit=2").json()
    assert [r["id"] for r in one["members"]] == members[:2]
    more = web.get(f"/api/batches/{batch}?limit=2&cursor={one['next']}").json()
    assert [r["id"] for r in more["members"]] == members[2:4]
    assert one["kwargs"] == {"tag": "nightly"}
    page = web.get(f"/batches/{batch}").text
    for member in members:
        assert f'href="/runs/{member}"' in page
    assert "ValueError: bad" in page

    # the run page links to its batch; the callback's run shows once the batch completes
    assert f'<a href="/batches/{batch}">{batch}</a>' in web.get(f"/runs/{members[0]}").text
    assert 'id="batch">-<' in web.get(f"/runs/{enqueue(conn)}").text
    conn.execute(
        "UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now() WHERE id = ANY(%s)",
        (members[3:],),
    )
    done = web.get(f"/api/batches/{batch}").json()
    assert done["progress"] == 100.0 and done["completed_at"] is not None
    callback = done["callback_run_id"]
    assert callback is not None and done["callback_state"] == "queued"
    assert f'href="/runs/{callback}"' in web.get(f"/batches/{batch}").text
    assert f'href="/runs/{callback}"' in web.get("/batches").text

    assert web.get("/batches/99999").status_code == 404
    assert web.get("/api/batches/99999").status_code == 404
    assert web.get(f"/api/batches/{batch}?cursor=zz").status_code == 400
    assert web.get("/api/batches?cursor=zz").status_code == 400


def test_the_package_asgi_can_be_called_again(dsn: str) -> None:
    """pgqueue.dashboard.asgi() imports its Starlette module lazily; a module of the same
    name replaced the package's function after the first call."""
    import pgqueue.dashboard

    pgqueue.dashboard.asgi(dsn, upstream_auth=True)
    assert callable(pgqueue.dashboard.asgi)
    pgqueue.dashboard.asgi(dsn, upstream_auth=True)
