"""Only pgqueue/dashboard/core.py, the entry that receives the user's App, knows
pgqueue.App: the other dashboard modules take a Dashboard, a connection or plain values
(so that the App can change behind its facade without touching them)."""

from __future__ import annotations

import ast

from tests.helpers import ROOT


def imports_of(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_only_core_imports_the_app() -> None:
    users = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "pgqueue" / "dashboard").glob("*.py")
        if any(i == "pgqueue.app" or i.startswith("pgqueue.app.") for i in imports_of(str(p)))
    )
    assert users == ["pgqueue/dashboard/core.py"]
