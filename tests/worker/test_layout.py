"""The worker's layout, read from its source with `ast` (nothing of pgqueue is imported):
the App reaches the worker through its entry only, and the records a run's parts hand
each other import no behaviour (docs/architecture.md)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

WORKER = Path(__file__).resolve().parents[2] / "pgqueue" / "worker"
# what records.py may import besides the standard library: plain data, no behaviour
RECORDS_MAY_IMPORT = {"pgqueue.errors", "pgqueue.states"}


def imported(path: Path) -> set[str]:
    """Every module `path` imports, type-only imports included (`from a import b` gives
    both a and a.b: b may be a module)."""
    package = ".".join(path.relative_to(WORKER.parent.parent).with_suffix("").parts)
    if path.name == "__init__.py":
        package += ".__init__"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level)[0]
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def worker_modules() -> list[Path]:
    return sorted(WORKER.rglob("*.py"))


def test_only_the_worker_entry_imports_the_app() -> None:
    """The worker's entry (pgqueue/worker/__init__.py) takes the App and hands its parts
    the narrow values they use; no other module of the worker names pgqueue.app."""
    entry = WORKER / "__init__.py"
    naming = [
        str(p.relative_to(WORKER.parent.parent))
        for p in worker_modules()
        if p != entry
        and any(n == "pgqueue.app" or n.startswith("pgqueue.app.") for n in imported(p))
    ]
    assert naming == []


def test_registration_does_not_import_the_pgqueue_package() -> None:
    """The worker's row gets pgqueue's version from the entry, not from `import pgqueue`
    (which would tie registration to everything the package's __init__ imports)."""
    names = imported(WORKER / "registration.py")
    assert "pgqueue" not in names
    assert not any(n.startswith("pgqueue.__") for n in names)


def test_records_import_no_behaviour() -> None:
    """pgqueue/worker/records.py: the standard library, pgqueue.errors and pgqueue.states
    only, so that every part (and pgqueue's tracing protocol) can name the records
    without an import circle."""
    names = {n for n in imported(WORKER / "records.py") if n.split(".")[0] not in {"__future__"}}
    foreign = {
        n
        for n in names
        if n.split(".")[0] not in sys.stdlib_module_names
        and not any(n == m or n.startswith(m + ".") for m in RECORDS_MAY_IMPORT)
    }
    assert foreign == set()
