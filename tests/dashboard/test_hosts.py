"""The dashboard against hostile requests (issue 40), through Starlette's test client and
a real database: forged Host headers (DNS rebinding), Origins, CSRF tokens of another
session, sessions that expired, guessed tokens, redirects off the site, cookies and input
the handler did not expect. tests/dashboard/test_serve.py covers what needs a real
server (bodies, slow clients, proxies); tests/dashboard/test_browser.py rebinding in
Chromium."""

from __future__ import annotations

import re
import time
from typing import Any

import psycopg
import pytest

pytest.importorskip("starlette")

from fastapi.testclient import TestClient

from pgqueue.dashboard import asgi
from pgqueue.dashboard.core import CSRF_COOKIE, SESSION_COOKIE, SESSION_MAX_AGE, Dashboard
from pgqueue.errors import ConfigError, UserError
from tests.dashboard.test_routes import batch_of, client, csrf, enqueue
from tests.dashboard.test_routes import web as web  # a fixture
from tests.helpers import run_state

SECRET_ARG = "secret-api-key-456"
FORGED = "rebind.attacker.example:8765"


@pytest.fixture
def run_id(conn: psycopg.Connection[Any]) -> int:
    return enqueue(conn, queue="mail", args=f'["{SECRET_ARG}"]')


def page_csrf(c: TestClient) -> str:
    """The CSRF token in a page's forms (with a session there is no CSRF cookie)."""
    page = c.get("/runs?state=queued")
    assert page.status_code == 200
    match = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert match is not None
    return match[1]


def signed_in(dsn: str, **options: Any) -> TestClient:
    c = client(dsn, token="s3cret", **options)
    c.__enter__()
    r = c.post("/login", data={"token": "s3cret"}, follow_redirects=False)
    assert r.status_code == 303, r.text
    return c


# -- Host and Origin -------------------------------------------------------------------


def test_a_forged_host_can_neither_read_nor_act(
    dsn: str, conn: psycopg.Connection[Any], run_id: int
) -> None:
    """What a DNS-rebound page sends: the dashboard's address, another name in Host."""
    conn.execute(
        "INSERT INTO pgqueue.schedules (name, cron, task, next_fire_at) "
        "VALUES ('nightly', '0 3 * * *', 'report', now() + interval '1 hour')"
    )
    with client(dsn) as c:
        good = csrf(c)
        assert SECRET_ARG in c.get(f"/api/runs/{run_id}").text  # the real name works
        forged = {"Host": FORGED}
        for path in ("/", f"/runs/{run_id}", f"/api/runs/{run_id}", "/api/runs", "/login"):
            r = c.get(path, headers=forged)
            assert r.status_code == 400, path
            assert SECRET_ARG not in r.text and "not an allowed host" in r.json()["error"]
        posts = [
            f"/api/runs/{run_id}/cancel",
            f"/api/runs/{run_id}/retry",
            "/api/runs/bulk",
            "/api/queues/mail/pause",
            "/api/schedules/nightly/trigger",
            "/api/schedules/nightly/pause",
        ]
        origin = {"Origin": f"http://{FORGED}"}
        for path in posts:
            body = {"action": "cancel", "filter": {}}
            r = c.post(path, json=body, headers={**good, **forged, **origin})
            assert r.status_code == 400, path
        # a Host with the right name but another port is another site
        assert c.get("/api/runs", headers={"Host": "testserver:8080"}).status_code == 400
    assert run_state(conn, run_id) == "queued"
    paused = conn.execute("SELECT count(*) FROM pgqueue.queues WHERE paused").fetchone()
    assert paused == (0,)
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (1,)


def test_loopback_names_and_added_hosts_are_allowed(dsn: str, run_id: int) -> None:
    with TestClient(
        asgi(dsn, upstream_auth=True, allowed_hosts=["ops.example.com", "pgq.test:8443"]),
        base_url="http://127.0.0.1:8765",
    ) as c:
        for host in (
            "127.0.0.1:8765",
            "localhost:8765",
            "[::1]:8765",
            "ops.example.com",
            "ops.example.com:9000",
            "pgq.test:8443",
        ):
            assert c.get("/api/runs", headers={"Host": host}).status_code == 200, host
        for host in (
            "localhost:8766",
            "localhost",
            "pgq.test",
            "pgq.test:443",
            "attacker.test:8765",
            "127.0.0.1:8765@attacker.test",
            "",
        ):
            assert c.get("/api/runs", headers={"Host": host}).status_code == 400, host


def test_the_csrf_origin_check_uses_the_allowed_hosts_not_the_host_header(
    dsn: str, conn: psycopg.Connection[Any], run_id: int
) -> None:
    with TestClient(
        asgi(dsn, upstream_auth=True, allowed_hosts=["ops.example.com"]),
        base_url="http://ops.example.com",
    ) as c:
        good = csrf(c)
        # an Origin that merely equals the Host it was sent with is not enough
        for origin in (
            "http://evil.example",
            "http://ops.example.com.evil.example",
            "null",
            "http://ops.example.com@evil.example",
        ):
            r = c.post(f"/api/runs/{run_id}/cancel", headers={**good, "Origin": origin})
            assert r.status_code == 403, origin
        assert run_state(conn, run_id) == "queued"
        # behind a TLS proxy the browser's Origin is https: still this dashboard
        headers = {**good, "Origin": "https://ops.example.com"}
        assert c.post(f"/api/runs/{run_id}/cancel", headers=headers).status_code == 200
    assert run_state(conn, run_id) == "canceled"


def test_asgi_needs_a_token_or_upstream_auth(dsn: str) -> None:
    with pytest.raises(ConfigError, match="upstream_auth=True"):
        asgi(dsn)
    with pytest.raises(UserError, match="not a host name"):
        asgi(dsn, token="t", allowed_hosts=["https://ops.example.com/"])
    with TestClient(asgi(dsn, token="t")) as c:
        assert c.get("/api/runs").status_code == 401


# -- sessions, CSRF, login -------------------------------------------------------------


def test_the_csrf_token_belongs_to_its_session(
    dsn: str, conn: psycopg.Connection[Any], run_id: int
) -> None:
    a, b = signed_in(dsn), signed_in(dsn)
    try:
        token_a, token_b = page_csrf(a), page_csrf(b)
        assert CSRF_COOKIE not in a.cookies
        assert token_a != token_b
        assert a.cookies[SESSION_COOKIE] != b.cookies[SESSION_COOKIE]
        origin = {"Origin": "http://testserver"}
        # b's session with a's token; a planted pgqueue_csrf cookie does not help either
        r = b.post(f"/api/runs/{run_id}/cancel", headers={**origin, "X-CSRF-Token": token_a})
        assert r.status_code == 403
        b.cookies.set(CSRF_COOKIE, "planted-value-planted-value")
        headers = {**origin, "X-CSRF-Token": "planted-value-planted-value"}
        assert b.post(f"/api/runs/{run_id}/cancel", headers=headers).status_code == 403
        assert run_state(conn, run_id) == "queued"
        r = b.post(f"/api/runs/{run_id}/cancel", headers={**origin, "X-CSRF-Token": token_b})
        assert r.status_code == 200
    finally:
        a.__exit__(None, None, None)
        b.__exit__(None, None, None)


def test_a_session_expires_and_its_cookie_says_so(dsn: str) -> None:
    c = signed_in(dsn)
    try:
        cookie = c.cookies[SESSION_COOKIE]
        assert "s3cret" not in cookie
        d = Dashboard(dsn, token="s3cret")
        try:
            assert d.session_ok(cookie)
            issued = str(int(time.time()) - SESSION_MAX_AGE - 1)
            nonce = "n" * 24
            old = f"{issued}.{nonce}.{d._mac('session', issued, nonce)}"
            assert not d.session_ok(old)
            assert not Dashboard(dsn, token="other").session_ok(cookie)
        finally:
            d.close()
        c.cookies.clear()
        c.cookies.set(SESSION_COOKIE, old)
        assert c.get("/api/runs").status_code == 401
        r = c.post("/login", data={"token": "s3cret"}, follow_redirects=False)
        assert f"Max-Age={SESSION_MAX_AGE}" in r.headers["set-cookie"]
    finally:
        c.__exit__(None, None, None)


def test_wrong_tokens_are_limited_per_client(dsn: str) -> None:
    with client(dsn, token="s3cret") as c:
        for _ in range(5):
            assert c.post("/login", data={"token": "guess"}).status_code == 401
        r = c.post("/login", data={"token": "guess"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
        # while limited, even the right token waits: guessing cannot go on
        assert c.post("/login", data={"token": "s3cret"}).status_code == 429
        # a script with the token is not a login
        assert c.get("/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_a_non_ascii_session_cookie_is_a_401_not_a_500(dsn: str) -> None:
    with client(dsn, token="s3cret") as c:
        for value in ("é", "☃" * 10, "1.x.é"):
            cookie = f"{SESSION_COOKIE}={value}".encode()
            r = c.get("/api/runs", headers={"Cookie": cookie})  # type: ignore[dict-item]
            assert r.status_code == 401, value
            r = c.get("/runs", headers={"Cookie": cookie})  # type: ignore[dict-item]
            assert r.status_code == 401, value
        cookie = f"{CSRF_COOKIE}=é".encode()
        r = c.get("/login", headers={"Cookie": cookie})  # type: ignore[dict-item]
        assert r.status_code == 401


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/",
        "/\\evil.example/",
        "/\\/evil.example",
        "\\\\evil.example",
        "/\t/evil.example",
        "https://evil.example/",
        "javascript:alert(1)",
        "/runs\r\nSet-Cookie: x=1",
        "/é",
    ],
)
def test_a_form_cannot_redirect_off_the_dashboard(
    web: TestClient, conn: psycopg.Connection[Any], target: str
) -> None:
    run_id = enqueue(conn)
    good = csrf(web)
    form = {"csrf": good["X-CSRF-Token"], "next": target, "confirmed": "yes"}
    r = web.post(
        f"/api/runs/{run_id}/cancel",
        data=form,
        headers={"Origin": good["Origin"]},
        follow_redirects=False,
    )
    assert (r.status_code, r.headers["location"]) == (303, "/")


def test_a_form_goes_back_to_its_own_page(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    run_id = enqueue(conn)
    good = csrf(web)
    form = {
        "csrf": good["X-CSRF-Token"],
        "next": "/runs?state=queued&queue=a%2Fb",
        "confirmed": "yes",
    }
    r = web.post(
        f"/api/runs/{run_id}/cancel",
        data=form,
        headers={"Origin": good["Origin"]},
        follow_redirects=False,
    )
    assert r.headers["location"] == "/runs?state=queued&queue=a%2Fb"


def test_cookies_are_secure_over_https(dsn: str) -> None:
    with TestClient(asgi(dsn, token="s3cret"), base_url="https://testserver") as c:
        page = c.get("/login")
        assert "Secure" in page.headers["set-cookie"]
        r = c.post("/login", data={"token": "s3cret"}, follow_redirects=False)
        assert r.status_code == 303 and "; Secure" in r.headers["set-cookie"]
    with TestClient(asgi(dsn, token="s3cret")) as c:
        r = c.post("/login", data={"token": "s3cret"}, follow_redirects=False)
        assert "Secure" not in r.headers["set-cookie"]


# -- headers and bad input ---------------------------------------------------------------


def test_every_answer_says_nosniff_and_pages_restrict_base_and_forms(
    web: TestClient, run_id: int
) -> None:
    for path in ("/", f"/runs/{run_id}", "/api/runs", "/static/dashboard.css", "/nowhere"):
        assert web.get(path).headers["x-content-type-options"] == "nosniff", path
    csp = web.get("/").headers["content-security-policy"]
    assert "base-uri 'none'" in csp and "form-action 'self'" in csp
    forged = web.get("/", headers={"Host": FORGED})
    assert forged.headers["x-content-type-options"] == "nosniff"


def test_bad_input_is_a_400_with_one_line(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    huge = "9" * 25
    batch, _ = batch_of(conn, 1)
    for path in (
        f"/api/batches?cursor={huge}",
        f"/batches?cursor={huge}",
        f"/api/batches/{batch}?cursor={huge}",
        f"/api/runs?cursor={huge}",
        f"/api/runs?state=failed&cursor=2026-01-01T00:00:00~{huge}",
        "/api/runs?state=failed&cursor=2026-01-01T00:00:00~-1",
        "/api/queues/a%00b",
        "/queues/a%00b",
        "/api/queues/%FF%FE",
        "/api/runs?queue=a%00b",
    ):
        r = web.get(path)
        assert r.status_code == 400, (path, r.status_code, r.text[:200])
        if path.startswith("/api/"):
            message = r.json()["error"]
            assert "\n" not in message and "database" not in message, message
    headers = csrf(web)
    r = web.post("/api/queues/a%00b/pause", headers=headers)
    assert r.status_code == 400 and "NUL" in r.json()["error"]


def test_an_integer_too_long_for_python_shows_as_its_digits(
    web: TestClient, conn: psycopg.Connection[Any], app: Any
) -> None:
    digits = "7" * 5000
    run_id = enqueue(conn, args=f"[{digits}, 1]", kwargs=f'{{"n": {digits}}}')
    page = web.get(f"/runs/{run_id}")
    assert page.status_code == 200 and digits in page.text
    body = web.get(f"/api/runs/{run_id}").json()
    assert body["args"] == [digits, 1] and body["kwargs"] == {"n": digits}
    assert web.get("/api/runs").status_code == 200
