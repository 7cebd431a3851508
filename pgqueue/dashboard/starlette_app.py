"""The dashboard on Starlette: each request is handed to Dashboard.handle in Starlette's
thread pool (the handler and its database calls are synchronous, as in Django).

Before the handler runs, and before any of a body is read: the `Host` header must be on
the allow-list (hosts.py; 400 otherwise), and a POST must be signed in, allowed to act
and declare no more than its limit (Dashboard.body_limit; 401, 403, 413). The body is then
read up to that limit (413 as soon as it grows past it) within BODY_TIMEOUT (408).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.requests import Request as StarletteRequest
from starlette.responses import Response as StarletteResponse
from starlette.routing import Route

from pgqueue.dashboard.core import Dashboard, Problem, Request, Response
from pgqueue.dashboard.hosts import Hosts

BODY_TIMEOUT = 10.0  # seconds a client has to send a POST's whole body


class BodyTooSlow(Exception):
    pass


def make_app(dashboard: Dashboard, hosts: Hosts) -> Starlette:
    async def endpoint(request: StarletteRequest) -> StarletteResponse:
        allowed = hosts.with_server(request.scope.get("server"))
        req = translate(request, allowed)
        host = request.headers.get("host", "")
        if not allowed.allows(host):
            return plain(
                400,
                f"Host {host[:80]!r} is not an allowed host of this dashboard: add it with "
                "--allowed-host (or allowed_hosts=) if it is yours",
            )
        if request.method == "POST":
            try:
                limit = dashboard.body_limit(req)
                body = await asyncio.wait_for(read_body(request, limit), BODY_TIMEOUT)
            except Problem as exc:
                return send(dashboard.handle_problem(req, exc))
            except TimeoutError:
                return plain(408, "the request body took too long to arrive", close=True)
            except ClientDisconnect:
                return plain(400, "the client went away", close=True)
            req = dataclasses.replace(req, body=body)
        return send(await run_in_threadpool(dashboard.handle, req))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(dashboard.close)

    app = Starlette(
        routes=[Route("/{path:path}", endpoint, methods=["GET", "POST"])], lifespan=lifespan
    )
    app.state.dashboard = dashboard
    return app


def translate(request: StarletteRequest, allowed: Hosts) -> Request:
    """The request as core.Request, without its body."""
    root = request.scope.get("root_path", "").rstrip("/")
    # still percent-encoded, so that a name holding "/" (%2F) stays one path segment
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if raw else request.scope["path"]
    if root and path.startswith(root):
        path = path[len(root) :]
    client = request.client
    return Request(
        method=request.method,
        path=path or "/",
        root=root,
        query=dict(request.query_params),
        headers={k.lower(): v for k, v in request.headers.items()},
        cookies=dict(request.cookies),
        body=b"",
        origin=f"{request.url.scheme}://{request.headers.get('host', '')}",
        client=client.host if client else "",
        origin_ok=allowed.allows_origin,
    )


async def read_body(request: StarletteRequest, limit: int) -> bytes:
    """The body, refused (413) as soon as it grows past `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Problem(413, f"request body too large (at most {limit} bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


def send(resp: Response) -> StarletteResponse:
    out = StarletteResponse(resp.body, resp.status, media_type=resp.content_type)
    for name, value in resp.headers:
        out.headers.append(name, value)
    if resp.status in (408, 413):  # the rest of the body stays unread: end the connection
        out.headers["connection"] = "close"
    return out


def plain(status: int, message: str, close: bool = False) -> StarletteResponse:
    out = StarletteResponse(
        json.dumps({"error": message}).encode(), status, media_type="application/json"
    )
    out.headers["x-content-type-options"] = "nosniff"
    if close:
        out.headers["connection"] = "close"
    return out
