"""The dashboard as one request handler, whatever serves it: the ASGI app (standalone,
FastAPI, Starlette) and the Django views translate their requests into a Request and
this module's Response back. Routing, authentication, CSRF and read-only live here once.

Authentication: with a token, a request is let in by `Authorization: Bearer <token>`, or
by the session cookie that the login form sets: when it was issued, a random nonce and an
HMAC of both under a key derived from the token (never the token), good for
SESSION_MAX_AGE. Failed logins are limited per client (LOGIN_FAILURES a minute, then 429).
Django's mount decides instead (docs/dashboard.md: staff to view, pgqueue.change_run to act) and
passes its verdict in.

CSRF: a POST with a valid Bearer header is a script's (a browser never adds that header
by itself, and no CORS header is ever sent, so another origin cannot make it add one).
Every other POST needs the CSRF token of the page (the X-CSRF-Token header or the `csrf`
form field) and, when the browser sends an Origin, an allowed one (Request.origin_ok;
see hosts.py). With a session the token is an HMAC of the session cookie, so it is good
for that session only; without one (no token, or Django's login) it must equal the
pgqueue_csrf cookie, which another origin can neither read nor set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import json
import re
import secrets
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeAlias

import jinja2
import psycopg
from psycopg import pq
from psycopg.types.json import set_json_loads

from pgqueue.app import App
from pgqueue.dashboard import data
from pgqueue.dashboard.formats import ago, clock, duration, json_default, number, pretty, quote
from pgqueue.db import connect as db
from pgqueue.db.database import Database
from pgqueue.enqueue.events import event_params
from pgqueue.errors import ConfigError, NotMigrated, RunNotFound, UserError
from pgqueue.ops.inspect import wait_text
from pgqueue.states import STATES

CSRF_COOKIE = "pgqueue_csrf"
SESSION_COOKIE = "pgqueue_session"
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
JSON_OIDS = (114, 3802)  # json, jsonb
MAX_BODY = 64 * 1024  # an action's body; larger ones are refused unread (413)
MAX_LOGIN_BODY = 4 * 1024  # the login form's, read before anyone is signed in
SESSION_MAX_AGE = 12 * 3600  # seconds a login lasts
LOGIN_FAILURES = 5  # wrong tokens a client may send per LOGIN_WINDOW before 429
LOGIN_WINDOW = 60.0
MAX_CLIENTS_TRACKED = 10_000  # failed-login records kept (the oldest go first)
PAGE_CSP = (
    "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


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
    client: str = ""  # the client's address (failed logins are counted per client)
    # whether a browser's Origin header names this dashboard; None: it must equal `origin`
    # (Django's mount, whose Host Django checked against ALLOWED_HOSTS)
    origin_ok: Callable[[str], bool] | None = None
    actor: str = ""  # who a POST acts as, for the audit log (set by Dashboard._handle)

    @property
    def secure(self) -> bool:
        return self.origin.startswith("https:")

    def same_origin(self, origin: str) -> bool:
        if self.origin_ok is not None:
            return self.origin_ok(origin)
        return origin == self.origin

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
    user: str | None = None  # who acts, for the audit log (Django's user name)


class Problem(Exception):
    """An HTTP error with a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# What a dashboard is made from: the user's App (its pool is used) or a DSN. This module
# is the only one of the dashboard that knows pgqueue.App; the others take this alias,
# a Dashboard, or a connection.
AppOrDsn: TypeAlias = App | str

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
        app_or_dsn: AppOrDsn,
        *,
        read_only: bool = False,
        token: str | None = None,
    ) -> None:
        self._own_app = not isinstance(app_or_dsn, App)
        # the App's database (its pool), or one of its own for a DSN
        self.database = (
            app_or_dsn.database
            if isinstance(app_or_dsn, App)
            else Database(app_or_dsn, pool_size=8)
        )
        # the tasks of the App's registry, for the pickers (none for a dashboard of a DSN)
        self.tasks = sorted(app_or_dsn.tasks) if isinstance(app_or_dsn, App) else []
        self.read_only = read_only
        self.token = token or None
        self._key = (
            hmac.new(self.token.encode(), b"pgqueue dashboard key", hashlib.sha256).digest()
            if self.token
            else None
        )
        self._failures: dict[str, deque[float]] = {}
        self._failures_lock = threading.Lock()
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

    def event_params(self, event: str, key: str | None, payload_json: str) -> dict[str, Any]:
        """emit_event.sql's parameters for an event typed into a page (the payload as
        JSON text), checked as App.emit_event checks them (names, size, depth)."""
        try:
            payload = json.loads(payload_json) if payload_json.strip() else None
        except ValueError:
            raise Problem(400, "the payload is not JSON") from None
        return event_params(self.database, event, key or None, payload, None)

    def close(self) -> None:
        """Close the pool opened for a DSN (an App passed in stays open)."""
        if self._own_app:
            self.database.close()

    # -- the entry point ---------------------------------------------------------------

    def handle(self, req: Request, access: Access | None = None) -> Response:
        resp = self._answer(req, access)
        resp.headers.append(("x-content-type-options", "nosniff"))
        return resp

    def handle_problem(self, req: Request, exc: Problem) -> Response:
        """The answer to a request refused before it reached handle (asgi.py)."""
        resp = self.problem(req, exc.status, exc.message)
        resp.headers.append(("x-content-type-options", "nosniff"))
        return resp

    def _answer(self, req: Request, access: Access | None) -> Response:
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
        except psycopg.DataError as exc:  # a value the checks above let through
            return self.problem(
                req, 400, f"a value of this request is out of range or invalid: {exc.sqlstate}"
            )
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
                req = dataclasses.replace(req, actor=self.actor(req, access))
            return fn(self, req, m)
        if any(p.match(req.path) for _, p, _ in ROUTES):
            raise Problem(405, f"{req.method} is not allowed here")
        raise Problem(404, f"no page at {req.path}")

    def body_limit(self, req: Request) -> int:
        """How many bytes of body this request may send, decided from its headers before
        any of the body is read: raises Problem (401, 403, 413) for a POST that would be
        refused whatever its body (not signed in, read-only, too large)."""
        if req.method != "POST":
            return 0
        limit = MAX_BODY
        if req.path == "/login":
            limit = MAX_LOGIN_BODY
        else:
            access = self.token_access(req)
            if not access.view:
                raise Problem(401, "authentication required: send Authorization: Bearer <token>")
            if self.read_only:
                raise Problem(403, "this dashboard is read-only")
        length = req.headers.get("content-length", "")
        if length and (not length.isdigit() or int(length) > limit):
            raise Problem(413, f"request body too large (at most {limit} bytes)")
        return limit

    def token_access(self, req: Request) -> Access:
        if self.token is None:
            return Access(view=True, act=True)
        ok = self.bearer_ok(req) or self.session_ok(req.cookies.get(SESSION_COOKIE, ""))
        return Access(view=ok, act=ok)

    def actor(self, req: Request, access: Access) -> str:
        """Who the audit log says acted: the Django user, "token" (a session or a script
        with the token), or "anonymous" (no token: a loopback dashboard, or a mount whose
        application authenticated the request)."""
        if access.user:
            return access.user
        return "token" if self.token else "anonymous"

    def bearer_ok(self, req: Request) -> bool:
        scheme, _, value = req.headers.get("authorization", "").partition(" ")
        return (
            self.token is not None
            and scheme.lower() == "bearer"
            and hmac.compare_digest(value.strip().encode(), self.token.encode())
        )

    # -- sessions ------------------------------------------------------------------------

    def _mac(self, *parts: str) -> str:
        assert self._key is not None
        message = "\n".join(parts).encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def new_session(self) -> str:
        issued = str(int(time.time()))
        nonce = secrets.token_urlsafe(18)
        return f"{issued}.{nonce}.{self._mac('session', issued, nonce)}"

    def session_ok(self, value: str) -> bool:
        """A session cookie this dashboard issued, less than SESSION_MAX_AGE ago."""
        if self._key is None or not value.isascii():
            return False
        issued, _, rest = value.partition(".")
        nonce, _, mac = rest.partition(".")
        if not hmac.compare_digest(mac.encode(), self._mac("session", issued, nonce).encode()):
            return False
        return issued.isdigit() and 0 <= time.time() - int(issued) < SESSION_MAX_AGE

    def csrf_token(self, req: Request) -> tuple[str, bool]:
        """The CSRF token of the request's pages, and whether it needs a new pgqueue_csrf
        cookie: an HMAC of the session when there is one, else the cookie's value."""
        session = req.cookies.get(SESSION_COOKIE, "")
        if self.session_ok(session):
            return self._mac("csrf", session), False
        cookie = req.cookies.get(CSRF_COOKIE, "")
        if cookie.isascii() and len(cookie) >= 16:
            return cookie, False
        return secrets.token_urlsafe(24), True

    def check_post(self, req: Request, access: Access) -> None:
        if self.read_only:
            raise Problem(403, "this dashboard is read-only")
        if not access.act:
            raise Problem(403, "you may view this dashboard but not act (pgqueue.change_run)")
        if self.bearer_ok(req):
            return
        origin = req.headers.get("origin")
        if origin is not None and not req.same_origin(origin):
            raise Problem(403, f"cross-origin request refused (Origin {origin[:80]!r})")
        sent = req.headers.get("x-csrf-token") or form(req).get("csrf", "")
        expected, fresh = self.csrf_token(req)
        if fresh or not hmac.compare_digest(sent.encode(), expected.encode()):
            raise Problem(403, "missing or wrong CSRF token: reload the page")

    # -- responses ---------------------------------------------------------------------

    def page(
        self, req: Request, template: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        csrf, fresh = self.csrf_token(req)
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
            ("content-security-policy", PAGE_CSP),
            ("x-frame-options", "DENY"),
            ("referrer-policy", "same-origin"),
        ]
        if fresh:
            secure = "; Secure" if req.secure else ""
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
        if origin is not None and not req.same_origin(origin):
            raise Problem(403, "cross-origin request refused")
        wait = self.login_wait(req.client)
        if wait:
            resp = self.page(
                req, "login.html", {"error": f"too many wrong tokens: wait {wait} s"}, status=429
            )
            resp.headers.append(("retry-after", str(wait)))
            return resp
        given = form(req).get("token", "")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            self.login_failed(req.client)
            return self.page(req, "login.html", {"error": "wrong token"}, status=401)
        secure = "; Secure" if req.secure else ""
        cookie = (
            f"{SESSION_COOKIE}={self.new_session()}; Path={req.root or '/'}; "
            f"Max-Age={SESSION_MAX_AGE}; HttpOnly; SameSite=Strict{secure}"
        )
        resp = redirect(f"{req.root}/")
        resp.headers.append(("set-cookie", cookie))
        return resp

    def login_wait(self, client: str) -> int:
        """Seconds until `client` may try a token again (0: now)."""
        now = time.monotonic()
        with self._failures_lock:
            times = self._failures.get(client)
            while times and times[0] <= now - LOGIN_WINDOW:
                times.popleft()
            if not times or len(times) < LOGIN_FAILURES:
                return 0
            return max(1, int(times[0] + LOGIN_WINDOW - now + 1))

    def login_failed(self, client: str) -> None:
        with self._failures_lock:
            if client not in self._failures and len(self._failures) >= MAX_CLIENTS_TRACKED:
                del self._failures[next(iter(self._failures))]
            self._failures.setdefault(client, deque(maxlen=LOGIN_FAILURES)).append(time.monotonic())

    def acted(self, req: Request, result: dict[str, Any]) -> Response:
        """A form post goes back to its page; a script gets the result as JSON."""
        if req.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return redirect(local_url(form(req).get("next", ""), req.root))
        return json_response(result)

    @contextlib.contextmanager
    def db(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection from the App's pool (autocommit), reading JSON with `loads_json`
        while the dashboard holds it (the loaders it had come back after)."""
        with self.database.connection() as conn:
            adapters = conn.adapters
            saved = [
                (oid, fmt, adapters.get_loader(oid, fmt))
                for oid in JSON_OIDS
                for fmt in (pq.Format.TEXT, pq.Format.BINARY)
            ]
            set_json_loads(loads_json, conn)
            try:
                yield conn
            finally:
                for oid, _fmt, loader in saved:
                    if loader is not None:
                        adapters.register_loader(oid, loader)


# -- helpers ---------------------------------------------------------------------------


def loads_json(data: bytes | bytearray | memoryview | str) -> Any:
    """json.loads, but an integer too long for int() (over 4,300 digits, Python's limit
    on converting text to int) stays its digits, as a string, instead of failing the
    page it is on."""
    if isinstance(data, memoryview):
        data = bytes(data)
    return json.loads(data, parse_int=_int)


def _int(text: str) -> int | str:
    return int(text) if len(text) <= 4000 else text


def local_url(url: str, root: str) -> str:
    """`url` if it is a path of this dashboard (under `root`), else the overview: a
    form's `next` must not send the browser to another site (`//host`, `/\\host`, a
    scheme, control characters; the page's own links are ASCII, percent-encoded)."""
    home = f"{root}/"
    if not url.startswith(home) or not url.isascii() or "\\" in url:
        return home
    if any(ord(c) < 0x20 or c == "\x7f" for c in url):
        return home
    rest = url[len(root) :]
    parts = urllib.parse.urlsplit(url)
    if rest.startswith("//") or parts.scheme or parts.netloc:
        return home
    return url


def is_form(req: Request) -> bool:
    """A browser's form post (rather than a script's JSON)."""
    return req.headers.get("content-type", "").startswith("application/x-www-form-urlencoded")


def confirmed(req: Request) -> bool:
    """A script's request, or a form post from a confirmation page (docs/dashboard.md:
    every action a browser sends asks first, with or without JavaScript)."""
    return not is_form(req) or form(req).get("confirmed") == "yes"


def form_list(req: Request, name: str) -> list[str]:
    """Every value of a repeated form field (checkboxes), and of comma-separated ones."""
    if not is_form(req):
        return []
    pairs = urllib.parse.parse_qsl(req.body.decode("utf-8", "replace"))
    return [part for k, v in pairs if k == name for part in v.split(",") if part]


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
            "filter": {
                k: v
                for k, v in values.items()
                if k in ("state", "queue", "task", "group", "error_class")
            },
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
