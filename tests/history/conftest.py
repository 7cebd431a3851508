"""The history checker's reports, at the end of the session: the test log shows every
verdict, and every violation with its events, whether the tests passed or not."""

from __future__ import annotations

from typing import Any

from tests.chaos import report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if report.HISTORY:
        terminalreporter.section("history checker")
        for text in report.HISTORY:
            terminalreporter.write_line(text)
