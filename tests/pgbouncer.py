"""A real PgBouncer in front of the test database, for tests/faults/test_poolers.py.

PgBouncer refuses to run as root, so as root (CI) it runs as another user: `nobody` in
front of a TCP server, and the owner of the socket directory in front of a server that
listens only on a Unix socket (the embedded test server's directory is private to the
user its postmaster runs as). Its config, auth file and log live in a temporary
directory of its own. Without the binary the tests skip, except in CI (CI=true), where
.ci/run installs it and a missing one is a failure.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.helpers import free_port, wait_until


def binary() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
    )
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI needs pgbouncer: apt-get install pgbouncer (see .ci/run)")
        pytest.skip("no pgbouncer (apt-get install pgbouncer)")
    return found


def run_as(host: str) -> str:
    """The user a root test session runs PgBouncer as: one that can reach `host`. A Unix
    socket directory (a host starting with "/") may be private to its owner, so its owner;
    a TCP server (or a directory root owns), nobody."""
    if not host.startswith("/"):
        return "nobody"
    owner = pwd.getpwuid(os.stat(host).st_uid).pw_name
    return "nobody" if owner == "root" else owner


CONFIG = """\
[databases]
{alias} = host={host} port={port} dbname={dbname} user={user}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/users.txt
pool_mode = {mode}
max_client_conn = 2000
default_pool_size = {pool_size}
; nothing cleans a server connection between clients: whatever session state a client
; leaves behind, the next client of that server connection inherits
server_reset_query =
logfile = {dir}/pgbouncer.log
{extra}"""


@contextlib.contextmanager
def running(dsn: str, mode: str, pool_size: int = 10, extra: str = "") -> Iterator[str]:
    """PgBouncer in `mode` (transaction or session) in front of `dsn`'s database, with
    `extra` lines of [pgbouncer] settings; yields the DSN clients use to reach the
    database through it."""
    exe = binary()
    target = conninfo_to_dict(dsn)
    host = str(target.get("host") or "127.0.0.1")
    workdir = Path(tempfile.mkdtemp(prefix="pgq-bouncer-"))
    listen = free_port()
    alias = "pooled"
    user = str(target.get("user") or "postgres")
    (workdir / "users.txt").write_text(f'"{user}" ""\n')
    config = workdir / "pgbouncer.ini"
    config.write_text(
        CONFIG.format(
            alias=alias,
            host=host,
            port=target.get("port") or 5432,
            dbname=target["dbname"],
            user=user,
            listen=listen,
            dir=workdir,
            mode=mode,
            pool_size=pool_size,
            extra=extra,
        )
    )
    command = [exe, str(config)]
    if os.geteuid() == 0:  # PgBouncer will not run as root
        user_of = run_as(host)
        shutil.chown(workdir, user_of)
        for f in workdir.iterdir():
            shutil.chown(f, user_of)
        command = ["runuser", "-u", user_of, "--", *command]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    through = make_conninfo("", host="127.0.0.1", port=listen, dbname=alias, user=user)
    try:

        def accepting() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"pgbouncer exited: {log(workdir)}")
            try:
                psycopg.connect(through, connect_timeout=2).close()
            except psycopg.OperationalError:
                return False
            return True

        wait_until(accepting, timeout=20, interval=0.05, message="pgbouncer to accept")
        yield through
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def log(workdir: Path) -> str:
    path = workdir / "pgbouncer.log"
    return path.read_text()[-4000:] if path.exists() else "(no log)"
