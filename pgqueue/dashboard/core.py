"""The dashboard as one request handler, whatever serves it: the ASGI app (standalone,
FastAPI, Starlette) and the Django views translate their requests into a Request and
this module's Response back. Routing, authentication, CSRF and read-only live here once.

Authentication: with a token, a request is let in by `Authorization: Bearer <token>`, or
by the session cookie that the login form sets (an HMAC of the token, never the token).
Django's mount decides instead (DESIGN 15: staff to view, pgqueue.change_run to act) and
passes its verdict in.

CSRF: a POST with a valid Bearer header is a script's (a browser never adds that header
by itself, and no CORS header is ever sent, so another origin cannot make it add one).
Every other POST needs the CSRF token of the page (the X-CSRF-Token header or the `csrf`
form field, equal to the pgqueue_csrf cookie, which another origin can neither read nor
set), and, when the browser sends an Origin, an Origin equal to the dashboard's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
import secrets
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import jinja2
import psycopg

from pgqueue import db
from pgqueue._inspect import wait_text
from pgqueue.app import App
from pgqueue.dashboard import data
from pgqueue.dashboard.formats import ago, clock, duration, json_default, number, pretty, quote
from pgqueue.errors import ConfigError, NotMigrated, RunNotFound, UserError
from pgqueue.states import STATES

CSRF_COOKIE = "pgqueue_csrf"
SESSION_COOKIE = "pgqueue_session"
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # below the mount point, starting with "/"
    root: str  # the mount point as the browser sees it ("" or "/prefix", no trailing /)
    query: Mapping[str, str]
    headers: Mapping[str, str]  # lower-case names
    cookies: Mapping[str, str]
    body: bytes
    origin: str  # scheme://host[:port] this request was addressed to

    @property
    def wants_html(self) -> bool:
        return not self.path.startswith("/api/")


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Access:
    """What the request may do, as decided outside (Django); None: decide here (token)."""

    view: bool
    act: bool


class Problem(Exception):
    """An HTTP error with a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


Handler = Callable[["Dashboard", Request, re.Match[str]], Response]
ROUTES: list[tuple[str, re.Pattern[str], Handler]] = []


def route(method: str, pattern: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        ROUTES.append((method, re.compile(f"^{pattern}$"), fn))
        return fn

    return register


class Dashboard:
    """The dashboard of one database. `app_or_dsn`: an App (its pool is used) or a DSN."""

    def __init__(
        self,
        app_or_dsn: App | str,
        *,
        read_only: bool = False,
        token: str | None = None,
    ) -> None:
        self._own_app = not isinstance(app_or_dsn, App)
        self.app = app_or_dsn if isinstance(app_or_dsn, App) else App(app_or_dsn, pool_size=8)
        self.read_only = read_only
        self.token = token or None
        self._session = (
            hmac.new(self.token.encode(), b"pgqueue dashboard session", hashlib.sha256).hexdigest()
            if self.token
            else None
        )
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("pgqueue.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters.update(
            ago=ago,
            clock=clock,
            duration=duration,
            pretty=pretty,
            number=number,
            urlencode=quote,
            waited=wait_text,
        )

    def close(self) -> None:
        """Close the pool of the App made from a DSN (an App passed in stays open)."""
        if self._own_app:
            self.app.close()

    # -- the entry point ---------------------------------------------------------------

    def handle(self, req: Request, access: Access | None = None) -> Response:
        try:
            return self._handle(req, access)
        except Problem as exc:
            return self.problem(req, exc.status, exc.message)
        except (RunNotFound, data.NotFound) as exc:
            return self.problem(req, 404, str(exc))
        except (ConfigError, NotMigrated) as exc:  # no database, or not one of ours
            return self.problem(req, 503, db.first_line(exc))
        except UserError as exc:
            return self.problem(req, 400, db.first_line(exc))
        except psycopg.Error as exc:
            return self.problem(req, 503, f"database: {db.first_line(exc)}")

    def _handle(self, req: Request, access: Access | None) -> Response:
        if req.path.startswith("/static/"):
            return self.static(req.path.removeprefix("/static/"))
        if access is None:
            if req.path == "/login":
                return self.login(req)
            access = self.token_access(req)
        if not access.view:
            if req.wants_html and req.method == "GET":
                return self.page(req, "login.html", {"error": None}, status=401)
            raise Problem(401, "authentication required: send Authorization: Bearer <token>")
        for method, pattern, fn in ROUTES:
            m = pattern.match(req.path)
            if m is None:
                continue
            if method != req.method:
                continue
            if method == "POST":
                self.check_post(req, access)
            return fn(self, req, m)
        if any(p.match(req.path) for _, p, _ in ROUTES):
            raise Problem(405, f"{req.method} is not allowed here")
        raise Problem(404, f"no page at {req.path}")

    def token_access(self, req: Request) -> Access:
        if self.token is None:
            return Access(view=True, act=True)
        ok = self.bearer_ok(req) or hmac.compare_digest(
            req.cookies.get(SESSION_COOKIE, ""), self._session or ""
        )
        return Access(view=ok, act=ok)

    def bearer_ok(self, req: Request) -> bool:
        scheme, _, value = req.headers.get("authorization", "").partition(" ")
        return (
            self.token is not None
            and scheme.lower() == "bearer"
            and hmac.compare_digest(value.strip().encode(), self.token.encode())
        )

    def check_post(self, req: Request, access: Access) -> None:
        if self.read_only:
            raise Problem(403, "this dashboard is read-only")
        if not access.act:
            raise Problem(403, "you may view this dashboard but not act (pgqueue.change_run)")
        if self.bearer_ok(req):
            return
        origin = req.headers.get("origin")
        if origin is not None and origin != req.origin:
            raise Problem(403, f"cross-origin request refused (Origin {origin[:80]})")
        sent = req.headers.get("x-csrf-token") or form(req).get("csrf", "")
        cookie = req.cookies.get(CSRF_COOKIE, "")
        if not cookie or not hmac.compare_digest(sent.encode(), cookie.encode()):
            raise Problem(403, "missing or wrong CSRF token: reload the page")

    # -- responses ---------------------------------------------------------------------

    def page(
        self, req: Request, template: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        csrf = req.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(24)
        here = req.root + req.path
        if req.query:
            here += "?" + urllib.parse.urlencode(dict(req.query))
        body = self.templates.get_template(template).render(
            **context,
            root=req.root,
            here=here,
            csrf=csrf,
            read_only=self.read_only,
            states=STATES,
            path=req.path,
        )
        headers = [
            ("cache-control", "no-store"),
            ("content-security-policy", "default-src 'self'; img-src 'self' data:"),
            ("x-frame-options", "DENY"),
            ("referrer-policy", "same-origin"),
        ]
        if CSRF_COOKIE not in req.cookies:
            secure = "; Secure" if req.origin.startswith("https:") else ""
            headers.append(
                (
                    "set-cookie",
                    f"{CSRF_COOKIE}={csrf}; Path={req.root or '/'}; SameSite=Strict{secure}",
                )
            )
        return Response(status, body.encode(), "text/html; charset=utf-8", headers)

    def problem(self, req: Request, status: int, message: str) -> Response:
        headers = [("www-authenticate", "Bearer")] if status == 401 else []
        if req.wants_html and req.method == "GET":
            resp = self.page(req, "error.html", {"status": status, "message": message}, status)
            resp.headers += headers
            return resp
        return json_response({"error": message}, status, headers)

    def static(self, name: str) -> Response:
        suffix = name[name.rfind(".") :] if "." in name else ""
        if "/" in name or suffix not in STATIC_TYPES:
            raise Problem(404, "no such file")
        try:
            body = resources.files("pgqueue.dashboard").joinpath("static", name).read_bytes()
        except FileNotFoundError:
            raise Problem(404, "no such file") from None
        return Response(200, body, STATIC_TYPES[suffix], [("cache-control", "max-age=300")])

    def login(self, req: Request) -> Response:
        if self.token is None:
            return redirect(f"{req.root}/")
        if req.method == "GET":
            return self.page(req, "login.html", {"error": None}, status=401)
        origin = req.headers.get("origin")
        if origin is not None and origin != req.origin:
            raise Problem(403, "cross-origin request refused")
        given = form(req).get("token", "")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return self.page(req, "login.html", {"error": "wrong token"}, status=401)
        secure = "; Secure" if req.origin.startswith("https:") else ""
        cookie = (
            f"{SESSION_COOKIE}={self._session}; Path={req.root or '/'}; HttpOnly; "
            f"SameSite=Strict{secure}"
        )
        resp = redirect(f"{req.root}/")
        resp.headers.append(("set-cookie", cookie))
        return resp

    def acted(self, req: Request, result: dict[str, Any]) -> Response:
        """A form post goes back to its page; a script gets the result as JSON."""
        if req.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            back = form(req).get("next", "")
            if not back.startswith(f"{req.root}/") or back.startswith("//"):
                back = f"{req.root}/"
            return redirect(back)
        return json_response(result)

    def db(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        """A connection from the App's pool (autocommit)."""
        return self.app.connection()


# -- helpers ---------------------------------------------------------------------------


def form(req: Request) -> dict[str, str]:
    if not req.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}
    return dict(urllib.parse.parse_qsl(req.body.decode("utf-8", "replace")))


def request_json(req: Request) -> dict[str, Any]:
    if len(req.body) > MAX_BODY:
        raise Problem(413, "request body too large")
    if req.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        values = form(req)
        return {
            "action": values.get("action"),
            "filter": {k: v for k, v in values.items() if k in ("state", "queue", "task", "group")},
        }
    try:
        body = json.loads(req.body or b"{}")
    except ValueError:
        raise Problem(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise Problem(400, "the body must be a JSON object")
    return body


def int_param(req: Request, name: str, default: int, low: int, high: int) -> int:
    text = req.query.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise Problem(400, f"{name} must be an integer") from None
    if not low <= value <= high:
        raise Problem(400, f"{name} must be between {low} and {high}")
    return value


def json_response(
    value: Any, status: int = 200, headers: list[tuple[str, str]] | None = None
) -> Response:
    body = json.dumps(value, default=json_default, separators=(",", ":")).encode()
    return Response(
        status, body, "application/json", [("cache-control", "no-store")] + (headers or [])
    )


def redirect(url: str) -> Response:
    return Response(303, b"", "text/plain", [("location", url)])
