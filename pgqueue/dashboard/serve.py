"""`pgqueue dashboard`: the ASGI app under uvicorn, bound only where it is safe to."""

from __future__ import annotations

import ipaddress
import socket
import sys

from pgqueue.app import App
from pgqueue.errors import UserError


def is_loopback(host: str) -> bool:
    """True if every address `host` names is a loopback address."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def check_bind(host: str, token: str | None) -> None:
    if not token and not is_loopback(host):
        raise UserError(
            f"refusing to serve the dashboard on {host} without a token: pass --token "
            "(or set PGQUEUE_DASHBOARD_TOKEN), or bind 127.0.0.1"
        )


def run(
    app: App, *, host: str, port: int, read_only: bool, token: str | None, root_path: str
) -> None:
    try:
        import uvicorn
    except ImportError:
        raise UserError(
            "the dashboard needs its extra: pip install 'pgqueue-jobs[dashboard]'"
        ) from None
    from pgqueue.dashboard import asgi

    shown = f"[{host}]" if ":" in host else host
    mode = ", read-only" if read_only else ""
    print(f"pgqueue dashboard on http://{shown}:{port}{root_path}/{mode}", file=sys.stderr)
    uvicorn.run(
        asgi(app, read_only=read_only, token=token),
        host=host,
        port=port,
        root_path=root_path.rstrip("/"),
        log_level="warning",
        proxy_headers=True,
    )
