"""Fixtures of the chaos suite: a private PostgreSQL server (stopped and restarted by the
outage scenario, and given few connection slots for the exhaustion scenario), and the
end-of-session table of every scenario's row."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.chaos import report
from tests.chaos.harness import MAX_CONNECTIONS, PrivateServer
from tests.helpers import embedded_server


@pytest.fixture(scope="session")
def private_server() -> Iterator[PrivateServer]:
    with embedded_server("pgq-chaos-") as embedded:
        server = PrivateServer(embedded)
        with psycopg.connect(server.dsn(), autocommit=True) as c:
            c.execute(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS}")
        server.stop()
        server.start()
        yield server


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if report.ROWS:
        terminalreporter.section(f"chaos ({report.ROWS[0].mode} mode)")
        terminalreporter.write_line(report.table(report.ROWS))
