"""The pgqueue dashboard: see and steer every queue from a browser (docs/dashboard.md).

`pgqueue dashboard` serves it; `asgi(...)` returns it as an ASGI app to mount in FastAPI
or Starlette; `pgqueue.contrib.django.urls` mounts it in Django. Needs the `dashboard`
extra (Starlette, Jinja2, and uvicorn for the command).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pgqueue.dashboard import routes as _routes  # noqa: F401  (registers the pages)
from pgqueue.dashboard.core import AppOrDsn, Dashboard
from pgqueue.errors import ConfigError

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["Dashboard", "asgi"]


def asgi(
    app_or_dsn: AppOrDsn,
    *,
    read_only: bool = False,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    upstream_auth: bool = False,
) -> Starlette:
    """The dashboard of `app_or_dsn` (a pgqueue.App, whose pool it uses, or a DSN) as an
    ASGI app.

    `token`: every request must carry it (Authorization: Bearer, or the login form's
    session cookie). Without a token the dashboard lets in every request that reaches
    it, so it is refused (ConfigError) unless `upstream_auth=True` says that the
    application it is mounted in authenticates every request before it gets here.
    `allowed_hosts`: the names (`ops.example.com`, or with a port,
    `ops.example.com:8443`) the `Host` header may carry besides the address the request
    arrived at (for a loopback address, 127.0.0.1, localhost and [::1] with its port);
    any other Host is answered 400 (DNS rebinding). `read_only`: every action answers
    403."""
    from pgqueue.dashboard.hosts import Hosts
    from pgqueue.dashboard.starlette_app import make_app

    hosts = Hosts.parse(allowed_hosts)
    if not token and not upstream_auth:
        raise ConfigError(
            "refusing to build a dashboard that lets everyone in: pass token=... (or "
            "upstream_auth=True if your application authenticates every request first)"
        )
    return make_app(Dashboard(app_or_dsn, read_only=read_only, token=token), hosts)
