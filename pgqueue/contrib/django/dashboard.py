"""The dashboard in Django (pgqueue.contrib.django.urls): Django's login decides who
comes in (staff to view; the pgqueue.change_run permission to act), and the same handler
as the standalone dashboard (pgqueue.dashboard.core) answers.

Django's CSRF middleware is bypassed for these views only because the dashboard checks
its own CSRF token on every POST, the same way in every mount (see core).

The dashboard's own modules (and jinja2, of the `dashboard` extra) are imported at the
first request, not with the URLconf: a project that mounts the dashboard without that
extra still runs every manage.py command, and the dashboard's page says what to install."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from django.conf import global_settings, settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.views.decorators.csrf import csrf_exempt

from pgqueue.contrib.django import conf

if TYPE_CHECKING:
    from pgqueue.dashboard.core import Dashboard

_lock = threading.Lock()
_dashboard: Dashboard | None = None


def dashboard() -> Dashboard:
    """One Dashboard per process, on the project's App (and its pool)."""
    global _dashboard
    try:
        from pgqueue.dashboard.core import Dashboard
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"the pgqueue dashboard needs {exc.name}: pip install 'pgqueue-jobs[dashboard]'"
        ) from None
    with _lock:
        if _dashboard is None or _dashboard.database is not conf.get_app().database:
            options = conf.options().get("DASHBOARD", {})
            _dashboard = Dashboard(conf.get_app(), read_only=bool(options.get("READ_ONLY")))
        return _dashboard


def login_url() -> str:
    """settings.LOGIN_URL, unless it is Django's default (/accounts/login/, a page a fresh
    project does not have) and the admin is installed: then the admin's login page, where
    staff sign in anyway."""
    from django.apps import apps

    if settings.LOGIN_URL != global_settings.LOGIN_URL:
        return str(settings.LOGIN_URL)
    if apps.is_installed("django.contrib.admin"):
        try:
            return str(reverse("admin:login"))
        except NoReverseMatch:  # installed, but its URLs are not mounted
            pass
    return str(settings.LOGIN_URL)


@csrf_exempt
def view(request: HttpRequest, path: str = "") -> HttpResponse:
    from django.contrib.auth.views import redirect_to_login

    user: Any = request.user
    if not (user.is_authenticated and user.is_active and user.is_staff):
        # as the admin does: whoever is not staff signs in as someone who is
        return redirect_to_login(request.get_full_path(), login_url())
    handler = dashboard()  # first: a missing extra is ImproperlyConfigured, one line
    from pgqueue.dashboard.core import Access, Request

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
    access = Access(
        view=True, act=bool(user.has_perm("pgqueue.change_run")), user=str(user.get_username())
    )
    resp = handler.handle(req, access)
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
