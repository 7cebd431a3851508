"""Helpers for the tests of the example web apps (Django, Flask, FastAPI): databases made
from a migrated template, and the apps' own commands run as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.helpers import ROOT

EXAMPLES = ROOT / "examples"


class Databases:
    """CREATE DATABASE ... TEMPLATE: a fresh copy of a migrated database in ~0.1 s."""

    def __init__(self, server: Any) -> None:
        self.params = {
            "host": server.host,
            "port": server.port,
            "user": server.user,
            "password": server.password,
        }

    def dsn(self, name: str) -> str:
        p = self.params
        return make_conninfo(
            host=p["host"],
            port=str(p["port"]),
            user=p["user"],
            dbname=name,
            password=p["password"] or None,
        )

    def create(self, prefix: str, template: str | None = None) -> str:
        name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        self._admin(query)
        return name

    def drop(self, name: str) -> None:
        self._admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def _admin(self, query: sql.Composable) -> None:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(query)


def run_command(
    args: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a Python command of an example app; fail the test with its output if it fails."""
    full_env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    full_env["PYTHONPATH"] = os.pathsep.join([str(cwd), str(ROOT)])
    full_env.update(env)
    done = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


def execute(dsn: str, query: Any, params: Any = None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(query, params)


def sqlalchemy_url(dsn: str) -> str:
    """postgresql+psycopg:// URL of a libpq DSN (a socket directory goes in the query)."""
    from sqlalchemy import URL

    p = conninfo_to_dict(dsn)
    host, port = str(p.get("host", "")), str(p.get("port", "5432"))
    on_socket = host.startswith("/")
    url = URL.create(
        "postgresql+psycopg",
        username=str(p.get("user", "")) or None,
        password=str(p.get("password", "")) or None,
        host=None if on_socket else host,
        port=None if on_socket else int(port),
        database=str(p["dbname"]),
        query={"host": host, "port": port} if on_socket else {},
    )
    return url.render_as_string(hide_password=False)
