"""`pgqueue dashboard`: the ASGI app under uvicorn, bound only where it is safe to.

uvicorn waits for a request's head as long as a client trickles it, so a few hundred
connections that each send a header line now and then would hold every file descriptor
of the process and starve the others. `guarded_protocol` bounds them: a connection must
deliver a whole request head within HEADER_TIMEOUT of connecting (or of its previous
response), and when more connections than `waiting` are waiting for one, the one waiting
longest is closed to make room for the new one. A browser sends its head at once, so it
is never the one closed. `waiting` and the listening socket's backlog are bounded by the
file descriptors the process may open (waiting_limit).
"""

from __future__ import annotations

import asyncio
import collections
import errno
import ipaddress
import resource
import socket
import sys
from typing import TYPE_CHECKING, Any

from pgqueue.dashboard.hosts import Hosts
from pgqueue.errors import UserError

if TYPE_CHECKING:  # core needs the dashboard's extra, which run() checks first
    from pgqueue.dashboard.core import AppOrDsn

HEADER_TIMEOUT = 10.0
MAX_WAITING = 1000  # connections without a request head, at most (see waiting_limit)
WILDCARDS = ("", "0.0.0.0", "::", "[::]")


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


def bound_name(host: str, port: int) -> list[str]:
    """The Host a browser sends for the address bound (none for a wildcard address,
    whose requests are let in by the address each arrived at)."""
    if host in WILDCARDS:
        return []
    name = f"[{host.strip('[]')}]" if ":" in host else host
    return [f"{name}:{port}"]


def waiting_limit() -> int:
    """How many connections may wait for a request head, and how many the listening
    socket may hold unaccepted: an eighth of the file descriptors each (at most
    MAX_WAITING). asyncio accepts up to the backlog in one go and the connections it then
    closes give their descriptors back only on the next turn of the loop, so at the worst
    moment waiting + accepted + closing use three eighths, and the rest stays free for
    the database pool and for browsers."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_WAITING
    return max(8, min(MAX_WAITING, soft // 8))


def guarded_protocol(header_timeout: float, waiting: int) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a deadline on request heads and a bound on the
    connections waiting for one (see the module's docstring)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    queue: collections.OrderedDict[Any, None] = collections.OrderedDict()

    class GuardedH11(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _seen: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_head()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not self._seen:  # a request head arrived
                self._stop_waiting()

        def on_response_complete(self) -> None:
            if not self.transport.is_closing():
                self._await_head()
            super().on_response_complete()  # may start a pipelined request
            if self.cycle is not self._seen:
                self._stop_waiting()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

        def _await_head(self) -> None:
            self._stop_waiting()
            self._seen = self.cycle
            self._timer = self.loop.call_later(header_timeout, self.drop_waiting)
            queue[self] = None
            while len(queue) > waiting:
                oldest, _ = queue.popitem(last=False)
                oldest.drop_waiting()

        def _stop_waiting(self) -> None:
            queue.pop(self, None)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def drop_waiting(self) -> None:
            """Close a connection that sent no request head in time, or that the
            newer ones pushed out of the waiting queue."""
            self._stop_waiting()
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedH11


def run(
    app: AppOrDsn,
    *,
    host: str,
    port: int,
    read_only: bool,
    token: str | None,
    root_path: str,
    allowed_hosts: tuple[str, ...] = (),
    forwarded_allow_ips: str | None = None,
) -> None:
    try:
        import uvicorn
    except ImportError:
        raise UserError(
            "the dashboard needs its extra: pip install 'pgqueue-jobs[dashboard]'"
        ) from None
    from pgqueue.dashboard.core import Dashboard
    from pgqueue.dashboard.starlette_app import make_app

    # Bound before anything is printed: a port in use is one line (UserError), not a URL
    # followed by uvicorn's own error.
    sock = listening_socket(host, port)
    port = int(sock.getsockname()[1])  # the port chosen, for --port 0
    # without a token, check_bind has let only a loopback address through
    hosts = Hosts.parse([*bound_name(host, port), *allowed_hosts])
    dashboard = make_app(Dashboard(app, read_only=read_only, token=token), hosts)
    waiting = waiting_limit()
    config = uvicorn.Config(
        dashboard,
        host=host,
        port=port,
        root_path=root_path.rstrip("/"),
        log_level="warning",
        proxy_headers=True,
        forwarded_allow_ips=forwarded_allow_ips,
        http=guarded_protocol(HEADER_TIMEOUT, waiting),
        backlog=waiting,
        timeout_keep_alive=5,
    )
    server = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    mode = ", read-only" if read_only else ""
    print(f"pgqueue dashboard on http://{shown}:{port}{root_path}/{mode}", file=sys.stderr)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    if not server.started:
        raise UserError("the dashboard did not start (see the lines above)")


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), as uvicorn would bind it; a UserError if the
    address cannot be bound (the port is in use, the address is not this machine's)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        hint = (
            ": another process listens there; pick another --port"
            if (exc.errno == errno.EADDRINUSE)
            else ""
        )
        reason = exc.strerror or str(exc)
        raise UserError(f"cannot serve the dashboard on {host}:{port}: {reason}{hint}") from None
    sock.set_inheritable(True)
    return sock
