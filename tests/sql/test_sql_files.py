"""The statements in sql/: how they are loaded."""

from __future__ import annotations

import ast
from importlib import resources
from pathlib import Path

from psycopg import _queries

import pgqueue
from pgqueue.db import sql as _sql


def test_every_statement_is_short_enough_for_psycopgs_cache() -> None:
    """psycopg re-parses a longer query text in Python on every execution; comments are
    dropped at load time so that even the longest statement is cached."""
    assert _sql.PSYCOPG_CACHED_LENGTH == _queries.MAX_CACHED_STATEMENT_LENGTH
    lengths = {name: len(_sql.query(name).encode()) for name in _sql.names()}
    assert max(lengths.values()) <= _sql.PSYCOPG_CACHED_LENGTH, lengths
    assert all("--" not in _sql.query(name) for name in _sql.names())


def test_comments_are_stripped_outside_quotes_only() -> None:
    text = """-- a comment line
SELECT 'a -- b' AS "c--d",  -- trailing
       1 -- x

       -- indented comment
FROM t
"""
    assert _sql.strip_comments(text) == "SELECT 'a -- b' AS \"c--d\",\n       1\nFROM t\n"


def test_every_statement_file_is_named_in_the_library() -> None:
    """A file of sql/ that no code names is dead. A statement is loaded by its name, a
    string literal of pgqueue/ (passed to _sql.query directly or through a variable); the
    definitions in sql/functions/ and sql/views/ are checked by tests/sql/test_schema.py."""
    literals = {
        node.value
        for path in Path(pgqueue.__file__).parent.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    unused = sorted(set(_sql.names()) - literals)
    assert not unused, f"nothing loads sql/{{{','.join(unused)}}}.sql"


def test_every_part_is_included_and_every_inclusion_is_resolved() -> None:
    """A part of sql/parts/ is one shared rule: some statement includes it, and no
    statement is left with an unresolved {{NAME}}."""
    root = resources.files("pgqueue.sql")
    raw = [root.joinpath(f"{name}.sql").read_text() for name in _sql.names()]
    raw += [root.joinpath("parts", f"{name}.sql").read_text() for name in _sql.parts()]
    included = {m.group(1) for text in raw for m in _sql.PART.finditer(text)}
    assert included == set(_sql.parts())
    assert not [name for name in _sql.names() if "{{" in _sql.query(name)]


def test_a_part_is_replaced_where_it_stands_without_its_comments() -> None:
    rule = _sql.part("run_state_from_due")
    assert rule == "CASE WHEN due > now() THEN 'scheduled' ELSE 'queued' END"
    assert _sql.compose("SELECT {{run_state_from_due}} AS state\n") == (f"SELECT {rule} AS state\n")
    # a part may include another; the batch statements share theirs
    assert _sql.part("queue_flags_runs") in _sql.part("enqueue_batch_input")
    for name in ("enqueue_run", "enqueue_runs", "enqueue_runs_keyed", "enqueue_runs_plain"):
        assert rule in _sql.query(name)
    # the one statement without it inserts only runs due now: `queued` by the default
    assert rule not in _sql.query("enqueue_run_plain")
