"""The package's structure, read from the source text (nothing of pgqueue is imported):
the rules docs/architecture.md states, checked so that they stay true."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.helpers import ROOT

PACKAGE = ROOT / "pgqueue"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# Private names of other libraries that pgqueue reads on purpose.
FOREIGN_PRIVATE = {"_exit", "_current_frames", "_fields", "_get_current_object"}


@cache
def modules() -> dict[str, Path]:
    """Every module of pgqueue by dotted name (a package by its __init__.py)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if {"sql", "migrations"} & set(parts):  # links to sql/ and migrations/ in a checkout
            continue
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path) -> Iterator[str]:
    """The modules of pgqueue that `name` imports anywhere: at the top, inside functions
    and under TYPE_CHECKING alike."""
    mods = modules()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base
                for alias in node.names
            ]
        for target in targets:
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


@cache
def graph() -> dict[str, frozenset[str]]:
    return {name: frozenset(imported(name, path)) for name, path in modules().items()}


def cycles() -> list[list[str]]:
    """The strongly connected parts of the import graph, largest first (Tarjan)."""
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            found.append(sorted(part))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(found, key=len, reverse=True)


def test_at_most_twelve_modules_at_the_top() -> None:
    top = sorted(
        p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")
    )
    assert len(top) <= 12, top


def test_at_most_eight_modules_import_app() -> None:
    importers = sorted(name for name, targets in graph().items() if "pgqueue.app" in targets)
    assert len(importers) <= 8, importers


def test_the_largest_import_cycle_has_at_most_twelve_modules() -> None:
    largest = cycles()[0]
    assert len(largest) <= 12, largest


def test_nothing_inside_the_package_imports_its_public_face() -> None:
    """pgqueue/__init__.py imports App and everything public: a module of the package that
    imported it would tie itself into one cycle with all of them."""
    assert [name for name, targets in graph().items() if "pgqueue" in targets] == []


def test_no_private_name_is_read_across_modules() -> None:
    """`x._name` only on self or cls: what another module needs has a public name."""
    reads = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            attr = node.attr
            if not attr.startswith("_") or attr.startswith("__") or attr in FOREIGN_PRIVATE:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            reads.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert reads == []


def test_no_private_name_is_imported_from_another_module() -> None:
    """`from x import _name` only for a module of pgqueue (such as `db._sql`'s loader),
    never for a private function, class or variable of another module."""
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and f"{node.module}.{alias.name}" not in modules():
                    found.append(f"{name}:{node.lineno}: {node.module}.{alias.name}")
    assert found == []


# docs/architecture.md's layers: a module imports only its own layer or those below. The
# records (plain data that imports nothing but errors and states) belong to every layer.
LAYERS = [
    {"errors", "states", "_version"},
    {"db"},
    {"tasks", "enqueue", "runs", "workflows", "schedules", "_tracing"},
    {"ops", "_logging"},
    {"worker"},
    {"app"},
    {"dashboard", "cli", "contrib", "testing", "demo", "pgqueue", "__main__"},
]
RECORDS = {"pgqueue.runs.run", "pgqueue.worker.records"}


def layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else module
    return next(i for i, names in enumerate(LAYERS) if part in names)


def test_each_module_imports_only_its_layer_or_below() -> None:
    """The one exception: the worker's entry receives the user's App."""
    upward = [
        f"{name} -> {target}"
        for name, targets in graph().items()
        for target in targets
        if target not in RECORDS and layer(target) > layer(name)
    ]
    assert upward == ["pgqueue.worker -> pgqueue.app"]


def test_only_the_worker_entry_imports_app_in_the_worker() -> None:
    importers = [name for name, targets in graph().items() if "pgqueue.app" in targets]
    assert [n for n in importers if layer(n) < layer("pgqueue.app")] == ["pgqueue.worker"]


def test_records_import_no_behaviour() -> None:
    """The worker's records (a claimed run, a held attempt, an outcome) sit at the bottom:
    they import nothing of pgqueue but errors and states."""
    for record in sorted(RECORDS):
        targets = graph()[record]
        assert targets <= {"pgqueue.errors", "pgqueue.states"}, (record, sorted(targets))


def entry() -> tuple[str, str, str]:
    lines = re.findall(r"^Entry of a claimed run: (\S+)$", ARCHITECTURE.read_text(), re.M)
    assert len(lines) == 1, lines
    path, method, parameter = lines[0].split(":")
    return path, method, parameter


def test_the_documented_entry_of_a_claimed_run_exists() -> None:
    """docs/architecture.md names the one method that receives a claimed run, and its
    parameter: both must exist as written."""
    path, method, parameter = entry()
    cls_name, _, fn_name = method.partition(".")
    tree = ast.parse((ROOT / path).read_text())
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name]
    assert classes, f"{path} has no class {cls_name}"
    functions = [
        n
        for n in classes[0].body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == fn_name
    ]
    assert functions, f"{cls_name} has no method {fn_name}"
    assert parameter in [a.arg for a in functions[0].args.args], parameter


def test_each_package_of_tests_mirrors_a_package_of_the_code() -> None:
    """tests/<package>/test_<module>.py tests pgqueue/<package>/<module>.py; the folders that
    are not a package of the code hold the end-to-end suites."""
    end_to_end = {"apps", "chaos", "django_site", "e2e", "faults", "history", "model", "sql"}
    for folder in sorted(p for p in (ROOT / "tests").iterdir() if p.is_dir()):
        if folder.name in end_to_end or folder.name.startswith((".", "_")):
            continue
        assert (PACKAGE / folder.name).is_dir(), f"tests/{folder.name} mirrors no package"
