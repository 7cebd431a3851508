"""The dashboard on Starlette: each request is handed to Dashboard.handle in Starlette's
thread pool (the handler and its database calls are synchronous, as in Django)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as StarletteRequest
from starlette.responses import Response as StarletteResponse
from starlette.routing import Route

from pgqueue.dashboard.core import MAX_BODY, Dashboard, Request


def make_app(dashboard: Dashboard) -> Starlette:
    async def endpoint(request: StarletteRequest) -> StarletteResponse:
        body = b""
        if request.method == "POST":
            body = await request.body()
            if len(body) > MAX_BODY:
                return StarletteResponse(b'{"error":"request body too large"}', 413)
        root = request.scope.get("root_path", "").rstrip("/")
        # still percent-encoded, so that a name holding "/" (%2F) stays one path segment
        raw = request.scope.get("raw_path")
        path = raw.decode("latin-1") if raw else request.scope["path"]
        if root and path.startswith(root):
            path = path[len(root) :]
        req = Request(
            method=request.method,
            path=path or "/",
            root=root,
            query=dict(request.query_params),
            headers={k.lower(): v for k, v in request.headers.items()},
            cookies=dict(request.cookies),
            body=body,
            origin=f"{request.url.scheme}://{request.headers.get('host', '')}",
        )
        resp = await run_in_threadpool(dashboard.handle, req)
        out = StarletteResponse(resp.body, resp.status, media_type=resp.content_type)
        for name, value in resp.headers:
            out.headers.append(name, value)
        return out

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(dashboard.close)

    app = Starlette(
        routes=[Route("/{path:path}", endpoint, methods=["GET", "POST"])], lifespan=lifespan
    )
    app.state.dashboard = dashboard
    return app
