"""`pgqueue dashboard` as a user runs it (uvicorn in a process of its own) against what a
test client cannot send: bodies far over the limit, hundreds of clients that trickle
their request heads, requests through a proxy, forged Host headers on the wire."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("uvicorn")

from pgqueue.dashboard.serve import HEADER_TIMEOUT
from tests.dashboard.test_routes import enqueue
from tests.helpers import ROOT, free_port, run_state, wait_until

TOKEN = "s3cret-token"


@contextlib.contextmanager
def dashboard(dsn: str, *args: str, nofile: int | None = None) -> Iterator[tuple[int, int]]:
    """`pgqueue dashboard --dsn DSN ARGS` on a free port: (its pid, the port). `nofile`:
    the soft limit of its file descriptors (a machine's usual 1,024, scaled down)."""
    port = free_port()
    cmd = [sys.executable, "-m", "pgqueue", "dashboard", "--dsn", dsn, "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("PGQUEUE_DASHBOARD_TOKEN", "FORWARDED_ALLOW_IPS"):
        env.pop(name, None)

    def limit() -> None:
        if nofile is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))

    proc = subprocess.Popen(
        [*cmd, *args], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, preexec_fn=limit
    )

    def up() -> bool:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    try:
        wait_until(up, timeout=30, message="the dashboard to listen")
        yield proc.pid, port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def exchange(port: int, head: bytes, body: bytes = b"", timeout: float = 5.0) -> bytes:
    """Send a request head (and what there is of a body), return what comes back first."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        with contextlib.suppress(OSError):
            s.sendall(body)
        return s.recv(65536)


def get(port: int, path: str, headers: dict[str, str] | None = None, timeout: float = 5) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_huge_body_is_refused_before_it_is_read(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """A body over the limit gets 413 from its Content-Length, or as soon as it grows
    past the limit; an unauthenticated one 401 from its head alone. The process does
    not grow by what was sent."""
    run_id = enqueue(conn)
    with dashboard(dsn, "--token", TOKEN) as (pid, port):
        for _ in range(5):
            assert get(port, "/api/runs", {"Authorization": f"Bearer {TOKEN}"}) == 200
        before = rss_mb(pid)
        big = 300 * 1024 * 1024
        path = f"/api/runs/{run_id}/cancel"
        auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {big}\r\n"
        ).encode()
        # the head is enough for an answer: nothing of the body is waited for
        answer = exchange(port, head + auth + b"\r\n")
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        answer = exchange(port, head + b"\r\n")
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        # no Content-Length: the body is refused once it grows past the limit
        chunked = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        ).encode()
        chunk = b"%x\r\n%s\r\n" % (256 * 1024, b" " * 256 * 1024)
        answer = exchange(port, chunked + auth + b"\r\n", chunk)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        # and a client that keeps pushing a body after its 413 does not make it grow
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(head + auth + b"\r\n")
            with contextlib.suppress(OSError):
                for _ in range(64):
                    s.sendall(b"x" * 1024 * 1024)
        grown = rss_mb(pid) - before
        assert grown < 20, f"the dashboard grew by {grown:.0f} MB"
        assert get(port, "/api/runs", {"Authorization": f"Bearer {TOKEN}"}) == 200
    assert run_state(conn, run_id) == "queued"


def test_trickling_clients_do_not_starve_a_normal_request(dsn: str) -> None:
    """400 connections that each send part of a request head and then a header line now
    and then, against a process allowed 256 file descriptors: a normal request is still
    answered within 2 s."""
    with dashboard(dsn, nofile=256) as (_pid, port):
        slow: list[socket.socket] = []
        try:
            for _ in range(400):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(f"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
                slow.append(s)
            for s in slow:
                with contextlib.suppress(OSError):
                    s.sendall(b"X-Slow: 1\r\n")
            started = time.monotonic()
            assert get(port, "/api/workers", timeout=10) == 200
            assert time.monotonic() - started < 2
            for s in slow:
                with contextlib.suppress(OSError):
                    s.sendall(b"X-Slow: 2\r\n")
            started = time.monotonic()
            assert get(port, "/api/workers", timeout=10) == 200
            assert time.monotonic() - started < 2
        finally:
            for s in slow:
                s.close()


def test_a_request_head_must_arrive_in_time(dsn: str) -> None:
    with (
        dashboard(dsn) as (_pid, port),
        socket.create_connection(("127.0.0.1", port), timeout=HEADER_TIMEOUT + 10) as s,
    ):
        s.sendall(f"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        started = time.monotonic()
        assert s.recv(1024) == b""  # closed by the server
        assert time.monotonic() - started < HEADER_TIMEOUT + 5


def test_forwarded_headers_count_only_from_the_proxies_named(dsn: str) -> None:
    """Behind a TLS proxy, the session cookie is Secure when the proxy is trusted
    (--forwarded-allow-ips) and says https; a Host that is not allowed is 400 on the wire
    as in the test client."""
    login = {"Content-Type": "application/x-www-form-urlencoded"}
    body = f"token={TOKEN}".encode()
    for allowed, secure in (("10.1.2.3", False), ("*", True)):
        args = ("--token", TOKEN, "--forwarded-allow-ips", allowed)
        with dashboard(dsn, *args, "--allowed-host", "ops.example.com") as (_pid, port):
            head = (
                f"POST /login HTTP/1.1\r\nHost: ops.example.com\r\n"
                f"X-Forwarded-Proto: https\r\nOrigin: https://ops.example.com\r\n"
                f"Content-Type: {login['Content-Type']}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            answer = exchange(port, head, body).decode("latin-1")
            assert answer.startswith("HTTP/1.1 303"), answer
            cookie = next(
                line for line in answer.splitlines() if line.lower().startswith("set-cookie:")
            )
            assert ("; Secure" in cookie) is secure, (allowed, cookie)
            forged = exchange(port, b"GET /login HTTP/1.1\r\nHost: attacker.test:80\r\n\r\n")
            assert forged.startswith(b"HTTP/1.1 400"), forged[:100]


def test_the_command_refuses_a_bad_allowed_host(dsn: str) -> None:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "pgqueue", "dashboard", "--dsn", dsn]
    out = subprocess.run(
        [*cmd, "--allowed-host", "https://ops.example.com/"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "not a host name" in out.stderr
