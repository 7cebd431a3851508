"""The worker's layout, read from its source with `ast` (nothing of pgqueue is imported):
the App reaches the worker through its entry only, the records a run's parts hand each
other import no behaviour, and every part is built complete by its constructor: none sets
another's attributes, asserts that one was set, or has a second phase of construction
(docs/architecture.md)."""

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


# Objects a part may set attributes on, by the name it holds them under: the records an
# attempt is made of (Held, and its Context), a logging record (a filter rewrites its
# level), a psycopg connection (its notify handler), and the user's App, whose public
# pool_size the worker's entry raises for workflows. Anything else is a part: it is built
# complete by its constructor and changes only itself.
MAY_SET_ON = {"held", "h", "record", "conn", "app"}


def classes() -> list[tuple[Path, ast.ClassDef]]:
    return [
        (path, node)
        for path in worker_modules()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ClassDef)
    ]


def root(node: ast.expr) -> ast.expr:
    """`a` of `a.b.c` (or of `a[0].b`)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def test_no_part_sets_an_attribute_of_another() -> None:
    """No code of the worker assigns an attribute of an object other than `self` (or
    `cls`), except on records (MAY_SET_ON): a part gets everything it uses in its
    constructor, and nobody fills it in later (the Worker builds its parts on the loop, in
    the order they need each other)."""
    found = []
    for path in worker_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            else:
                continue
            for target in targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                for element in elements:
                    if not isinstance(element, ast.Attribute):
                        continue
                    base = root(element)
                    name = base.id if isinstance(base, ast.Name) else ast.unparse(base)
                    if name in {"self", "cls"} and element.value is base:
                        continue  # its own attribute
                    if name not in MAY_SET_ON:
                        where = f"{path.relative_to(WORKER.parent.parent)}:{node.lineno}"
                        found.append(f"{where} {ast.unparse(element)}")
    assert found == []


def test_no_part_asserts_that_an_attribute_was_set() -> None:
    """No `assert self.x is not None` (nor `x = self.x` then `assert x is not None`, nor
    `assert a.b is not None`) in the worker: the mark of a part built in two phases, whose
    methods check that the second one came."""
    found = []
    for path in worker_modules():
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            aliases = {  # locals bound to an attribute: `loop = self._loop`
                target.id
                for node in ast.walk(fn)
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            for node in ast.walk(fn):
                if not isinstance(node, ast.Assert):
                    continue
                tests = node.test.values if isinstance(node.test, ast.BoolOp) else [node.test]
                for test in tests:
                    if not (isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.IsNot)):
                        continue
                    left = test.left
                    if isinstance(left, ast.Attribute) or (
                        isinstance(left, ast.Name) and left.id in aliases
                    ):
                        where = f"{path.relative_to(WORKER.parent.parent)}:{node.lineno}"
                        found.append(f"{where} {ast.unparse(test)}")
    assert found == []


def test_no_part_has_a_second_phase_of_construction() -> None:
    """No method named open (or init, setup, bind, attach) that hands a part, after its
    constructor, what it needs to work."""
    second_phase = {"open", "init", "setup", "bind", "attach"}
    found = [
        f"{path.relative_to(WORKER.parent.parent)} {cls.name}.{fn.name}"
        for path, cls in classes()
        for fn in cls.body
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in second_phase
    ]
    assert found == []
