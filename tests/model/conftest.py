"""The model checker's verdicts, at the end of the session: the test log shows SPIN's
output whether the tests passed or not."""

from __future__ import annotations

from typing import Any

from tests.model import spin


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if spin.VERDICTS:
        terminalreporter.section("SPIN: tests/model/lease.pml")
        for verdict in spin.VERDICTS:
            terminalreporter.write_line(str(verdict))
