"""The dashboard in Django (pgqueue.contrib.django.urls): Django's login decides who
comes in (staff to view; the pgqueue.change_run permission to act), and the same handler
as the standalone dashboard (pgqueue.dashboard.core) answers.

Django's CSRF middleware is bypassed for these views only because the dashboard checks
its own CSRF token on every POST, the same way in every mount (see core)."""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from pgqueue.contrib.django import conf
from pgqueue.dashboard.core import Access, Dashboard, Request

_lock = threading.Lock()
_dashboard: Dashboard | None = None


def dashboard() -> Dashboard:
    """One Dashboard per process, on the project's App (and its pool)."""
    global _dashboard
    with _lock:
        if _dashboard is None or _dashboard.app is not conf.get_app():
            options = conf.options().get("DASHBOARD", {})
            _dashboard = Dashboard(conf.get_app(), read_only=bool(options.get("READ_ONLY")))
        return _dashboard


@csrf_exempt
def view(request: HttpRequest, path: str = "") -> HttpResponse:
    user: Any = request.user
    if not (user.is_authenticated and user.is_active and user.is_staff):
        # as the admin does: whoever is not staff signs in as someone who is
        return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
    full = request.path
    root = full[: len(full) - len(path) - 1] if path and full.endswith(path) else full.rstrip("/")
    req = Request(
        method=request.method or "GET",
        path="/" + path,
        root=root,
        query={k: v for k, v in request.GET.items()},
        headers={k.lower(): v for k, v in request.headers.items()},
        cookies=dict(request.COOKIES),
        body=request.body if request.method == "POST" else b"",
        origin=f"{request.scheme}://{request.get_host()}",
    )
    access = Access(view=True, act=bool(user.has_perm("pgqueue.change_run")))
    resp = dashboard().handle(req, access)
    out = HttpResponse(resp.body, status=resp.status, content_type=resp.content_type)
    for name, value in resp.headers:
        if name == "set-cookie":
            key, _, rest = value.partition("=")
            out.cookies[key] = rest.split(";", 1)[0]
            out.cookies[key]["path"] = root or "/"
            out.cookies[key]["samesite"] = "Strict"
            if request.is_secure():
                out.cookies[key]["secure"] = True
        else:
            out[name] = value
    return out
