"""The pgqueue dashboard: see and steer every queue from a browser (docs/dashboard.md).

`pgqueue dashboard` serves it; `asgi(...)` returns it as an ASGI app to mount in FastAPI
or Starlette; `pgqueue.contrib.django.urls` mounts it in Django. Needs the `dashboard`
extra (Starlette, Jinja2, and uvicorn for the command).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgqueue.dashboard import routes as _routes  # noqa: F401  (registers the pages)
from pgqueue.dashboard.core import Dashboard

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from pgqueue.app import App

__all__ = ["Dashboard", "asgi"]


def asgi(app_or_dsn: App | str, *, read_only: bool = False, token: str | None = None) -> Starlette:
    """The dashboard of `app_or_dsn` (a pgqueue.App, whose pool it uses, or a DSN) as an
    ASGI app. `token`: every request must carry it (Authorization: Bearer, or the login
    form's cookie). `read_only`: every action answers 403."""
    from pgqueue.dashboard.asgi import make_app

    return make_app(Dashboard(app_or_dsn, read_only=read_only, token=token))
