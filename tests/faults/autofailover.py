"""A pg_auto_failover formation for the HA test (tests/faults/test_ha.py): a monitor and
two PostgreSQL 15 nodes (Debian's `postgresql-15-auto-failover`), each run by its own
`pg_autoctl ... --run` process, on 127.0.0.1 with trust authentication and no TLS, all
under one temporary directory. As root the processes run as the user postgres (Debian's
PostgreSQL refuses root). With two nodes the monitor makes the standby synchronous
(synchronous_standby_names = 'ANY 1 (...)'): a commit is acknowledged once the standby
has it. Without pg_autoctl the test skips, except in CI (CI=true) where it fails."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

from tests.helpers import free_port, wait_until

BIN = Path("/usr/lib/postgresql/15/bin")
PG_AUTOCTL = "/usr/bin/pg_autoctl"


class Formation:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.user = "postgres" if os.geteuid() == 0 else None
        self.monitor_port = free_port()
        self.ports = {"node1": free_port(), "node2": free_port()}
        self.procs: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
            "XDG_CONFIG_HOME": str(self.base / "config"),
            "XDG_DATA_HOME": str(self.base / "share"),
        }

    def command(self, *args: str) -> list[str]:
        run_as = ["runuser", "-u", self.user, "--"] if self.user else []
        return [*run_as, PG_AUTOCTL, *args]

    def ctl(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            self.command(*args), env=self.env(), capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise AssertionError(f"pg_autoctl {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def start(self, *args: str, log: str) -> None:
        with open(self.base / log, "ab") as out:
            self.procs.append(
                subprocess.Popen(
                    self.command(*args, "--run"),
                    env=self.env(),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def monitor_uri(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor_port}/pg_auto_failover?sslmode=disable"

    def set_up(self) -> None:
        common = ("--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl")
        self.start(
            "create",
            "monitor",
            "--pgdata",
            str(self.base / "monitor"),
            "--pgport",
            str(self.monitor_port),
            *common,
            log="monitor.log",
        )
        wait_until(lambda: self._monitor_up(), 60, 0.2, "the pg_auto_failover monitor")
        for name, port in self.ports.items():
            self.start(
                "create",
                "postgres",
                "--pgdata",
                str(self.base / name),
                "--pgport",
                str(port),
                "--name",
                name,
                "--monitor",
                self.monitor_uri(),
                *common,
                log=f"{name}.log",
            )
            if name == "node1":  # alone, a node is "single"; a primary once it has a standby
                wait_until(lambda: self.settled_as("single"), 90, 0.2, "node1 to be up")
        self.wait_settled()

    def _monitor_up(self) -> bool:
        done = subprocess.run(
            [str(BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.monitor_port)],
            capture_output=True,
        )
        return done.returncode == 0

    def state(self) -> list[dict[str, Any]]:
        out = self.ctl("show", "state", "--pgdata", str(self.base / "monitor"), "--json")
        return list(json.loads(out))

    def primary(self) -> str | None:
        with contextlib.suppress(AssertionError, json.JSONDecodeError):
            for node in self.state():
                if node["current_group_state"] == node["assigned_group_state"] == "primary":
                    return str(node["nodename"])
        return None

    def settled_as(self, *states: str) -> bool:
        """Each node in the state the monitor assigned, and those states are `states`."""
        with contextlib.suppress(AssertionError, json.JSONDecodeError):
            reached = sorted(
                n["current_group_state"]
                for n in self.state()
                if n["current_group_state"] == n["assigned_group_state"]
            )
            return reached == sorted(states)
        return False

    def settled(self) -> bool:
        """One primary and one secondary."""
        return self.settled_as("primary", "secondary")

    def wait_settled(self, timeout: float = 120) -> None:
        wait_until(self.settled, timeout, 0.2, "a primary and a secondary")

    def failover(self) -> float:
        """`pg_autoctl perform failover`, then until the old primary is a secondary again
        (pg_rewind if need be): the seconds until a new primary, and that wait done."""
        before = self.primary()
        start = time.monotonic()
        self.ctl("perform", "failover", "--pgdata", str(self.base / "monitor"))
        wait_until(lambda: self.primary() not in (None, before), 60, 0.1, "a new primary")
        took = time.monotonic() - start
        self.wait_settled()
        return took

    def dsn(self, dbname: str) -> str:
        """Both nodes; libpq connects to whichever takes writes."""
        return make_conninfo(
            host="127.0.0.1,127.0.0.1",
            port=",".join(str(p) for p in self.ports.values()),
            user="postgres",
            dbname=dbname,
            target_session_attrs="read-write",
            connect_timeout="3",
        )

    def tear_down(self) -> None:
        for name in ("node2", "node1", "monitor"):
            with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                self.ctl("stop", "--pgdata", str(self.base / name), timeout=30)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name} ---\n{p.read_text()[-3000:]}" for p in sorted(self.base.glob("*.log"))
        )


@contextlib.contextmanager
def formation() -> Iterator[Formation]:
    if not Path(PG_AUTOCTL).exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI needs pg_autoctl: apt-get install postgresql-15-auto-failover")
        pytest.skip("needs pg_autoctl (postgresql-15-auto-failover)")
    base = Path(tempfile.mkdtemp(prefix="pgq-ha-"))
    f = Formation(base)
    if f.user is not None:
        shutil.chown(base, f.user)
    try:
        f.set_up()
        yield f
    except BaseException:
        print(f.logs())
        raise
    finally:
        f.tear_down()
        shutil.rmtree(base, ignore_errors=True)
