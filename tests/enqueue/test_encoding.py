"""The one encoding of a run to insert (pgqueue/enqueue/encoding.py): its encoder and the
SQL part that reads it agree field by field, and an enqueue option is named only by the
options type, the encoder, the SQL that reads and inserts it (and the docs and tests)."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from pgqueue.db import sql as _sql
from pgqueue.enqueue import encoding
from pgqueue.enqueue.options import EnqueueOptions, RunRow
from tests.helpers import ROOT

READER = "sql/parts/enqueue_run_fields.sql"
# Where adding an enqueue option is a change: the options type (with its checks), the
# encoder, the part that reads the encoding, and the inserts that write its column
# (pgqueue.enqueue_unique() for runs with a unique key).
OPTIONS_TYPE = {
    "pgqueue/enqueue/options.py",
    "pgqueue/enqueue/checks.py",
    "pgqueue/enqueue/unique.py",
}
ENCODER = "pgqueue/enqueue/encoding.py"
INSERTS = {
    "sql/parts/enqueue_insert.sql",
    "sql/enqueue_runs_plain.sql",
    "sql/functions/enqueue_unique.sql",
}
OPTION_FILES = OPTIONS_TYPE | {ENCODER, READER} | INSERTS
# The fields every run has, which sql/enqueue_run_plain.sql inserts (a run with any other
# option goes to the general statements: encoding.plain).
PLAIN = {"task", "queue", "priority", "args", "kwargs", "max_attempts", "timeout_seconds"}
# Other files of the enqueue path that name a field, each for a reason of its own.
ALSO = {
    # which statement, the lookup of keys taken, the keys in the batch statements' result
    "idempotency_key": {
        "pgqueue/enqueue/inserts.py",
        "sql/enqueue_run.sql",
        "sql/enqueue_runs.sql",
        "sql/enqueue_runs_keyed.sql",
        "sql/parts/enqueue_batch_result.sql",
    },
    "unique_key": {"pgqueue/enqueue/inserts.py"},  # which statement
    # the NOTIFY of the runs' queues
    "queue": {
        "sql/enqueue_run.sql",
        "sql/enqueue_runs.sql",
        "sql/enqueue_runs_keyed.sql",
        "sql/parts/enqueue_batch_input.sql",
        "sql/parts/enqueue_batch_result.sql",
    },
    # an event's delay (emit_event)
    "delay": {"pgqueue/enqueue/enqueuer.py", "pgqueue/enqueue/events.py"},
}
# A batch's callback is a run the database enqueues (sql/batch_open.sql keeps its task's
# queue, priority and max_attempts): an option it should honour goes there too.
for _name in ("queue", "priority", "max_attempts"):
    ALSO.setdefault(_name, set()).add("pgqueue/enqueue/batches.py")
# The encoding's fields that the part reads into a column of another name.
READ_AS = {"run_at": "due", "delay": "due"}


def test_the_encoding_has_every_field_of_a_run_once() -> None:
    names = [f.name for f in dataclasses.fields(RunRow)]
    assert sorted(encoding.FIELDS) == sorted(names)


def _distinct_row() -> RunRow:
    """A row whose every field holds a value of its own."""
    return RunRow(
        task="t",
        queue="q",
        priority=7,
        args="[1]",
        kwargs='{"k":2}',
        max_attempts=9,
        timeout_seconds=1.5,
        group_key="g",
        idempotency_key="i",
        run_at=datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        delay=2.5,
        parent_id=11,
        unique_key="u",
        unique_while="active",
        unique_for=3.5,
        replace=True,
        after=(3, 5),
        on_dependency_failure="run",
        cancel_running=True,
    )


def test_encode_writes_each_field_at_its_place() -> None:
    row = _distinct_row()
    encoded = json.loads(encoding.encode(row))
    assert len(encoded) == len(encoding.FIELDS)
    for i, name in enumerate(encoding.FIELDS):
        value = getattr(row, name)
        if name in ("args", "kwargs"):
            value = json.loads(value)
        elif isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, tuple):
            value = list(value)
        assert encoded[i] == value, name
    assert json.loads(encoding.document([row, row])) == [encoded, encoded]


def _reads() -> dict[int, str]:
    """Position -> the column the part reads it into, from the part's text."""
    reads: dict[int, str] = {}
    for item in re.split(r",\n(?=\S)", _sql.part("enqueue_run_fields")):
        alias = item.split(" AS ")[-1].strip()
        for position in re.findall(r"\be ->>? (\d+)\b", item):
            reads[int(position)] = alias
    return reads


def test_the_part_reads_each_field_at_its_place() -> None:
    assert sorted(_reads()) == list(range(len(encoding.FIELDS)))
    for position, alias in _reads().items():
        name = encoding.FIELDS[position]
        assert alias == READ_AS.get(name, name), (position, name, alias)


def test_enqueue_unique_reads_each_field_at_its_place() -> None:
    """pgqueue.enqueue_unique() reads the encoding in its own text: at the part's
    positions, and a run given as an object (its input before revision 0025) becomes the
    array of FIELDS in order."""
    text = _sql.strip_comments((ROOT / "sql/functions/enqueue_unique.sql").read_text())
    compat = re.search(r"jsonb_build_array\((.*?)\);", text, re.S)
    assert compat is not None
    assert re.findall(r"e -> '(\w+)'", compat.group(1)) == list(encoding.FIELDS)
    body = text[compat.end() :]
    read = {int(p) for p in re.findall(r"\be ->>? (\d+)\b", body)}
    assert read == set(range(len(encoding.FIELDS)))
    # the insert's values, in the order of its column list
    values = re.search(r"VALUES \((.*?)\)\s+ON CONFLICT", body, re.S)
    assert values is not None
    at = [
        re.findall(r"\be ->>? (\d+)\b", v) for v in re.split(r",\s+(?![^()]*\))", values.group(1))
    ]
    columns = ("task", "queue", "state", "priority", "args", "kwargs")
    for column, value in zip(columns, at[: len(columns)], strict=True):
        assert [encoding.FIELDS[int(p)] for p in value] in ([], [column]), (column, value)


def test_the_part_reads_what_the_encoder_wrote(conn: psycopg.Connection[Any]) -> None:
    """Every field through the database: the encoder's value comes out of the part."""
    row = _distinct_row()
    text = "SELECT {{enqueue_run_fields}} FROM (SELECT %s::jsonb AS e) i"
    cur = conn.execute(_sql.compose(text), (encoding.encode(row),))  # type: ignore[arg-type]
    read = dict(zip([c.name for c in cur.description or ()], cur.fetchone() or (), strict=True))
    for name in encoding.FIELDS:
        if name in READ_AS:
            continue
        value = getattr(row, name)
        if name in ("args", "kwargs"):
            value = json.loads(value)
        elif isinstance(value, tuple):
            value = list(value)
        assert read[name] == value, name
    assert read["due"] == row.run_at
    # a missing or null value is the field's absence; a delay is from now()
    cur = conn.execute(
        _sql.compose(text.replace("SELECT", "SELECT now() AS now,")),  # type: ignore[arg-type]
        ('[[], {}, null, null, "t", "q", 0, 3, null, null, 60]',),
    )
    read = dict(zip([c.name for c in cur.description or ()], cur.fetchone() or (), strict=True))
    assert read["group_key"] == "" and read["replace"] is False and read["unique_key"] is None
    assert read["after"] is None and read["on_dependency_failure"] is None
    assert read["cancel_running"] is False
    assert (read["due"] - read["now"]).total_seconds() == 60


def _python_names(path: Path) -> set[str]:
    """The names a module's code uses (variables, attributes, keywords, string keys), not
    its comments or docstrings."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, (ast.keyword, ast.arg)) and node.arg:
            found.add(node.arg)
        elif isinstance(node, ast.Constant) and type(node.value) is str and len(node.value) < 80:
            found.update(re.findall(r"\w+", node.value))  # a name or a key, not a docstring
    return found


def _enqueue_path() -> dict[str, set[str]]:
    """Each file of the enqueue path -> the words its code uses."""
    files: dict[str, set[str]] = {}
    for path in sorted((ROOT / "pgqueue" / "enqueue").glob("*.py")):
        files[str(path.relative_to(ROOT))] = _python_names(path)
    sql = [*ROOT.glob("sql/enqueue*.sql"), *ROOT.glob("sql/parts/enqueue*.sql")]
    for path in [*sql, ROOT / "sql/functions/enqueue_unique.sql"]:
        files[str(path.relative_to(ROOT))] = set(
            re.findall(r"\w+", _sql.strip_comments(path.read_text()))
        )
    return files


def test_an_option_is_named_only_by_its_type_encoder_reader_and_inserts() -> None:
    """Adding an enqueue option is a change to the options type, the encoder, the SQL
    that reads and inserts the encoding, a test and the docs: no other file of the
    enqueue path names a run's field, but for the reasons in ALSO."""
    files = _enqueue_path()
    options = {f.name for f in dataclasses.fields(EnqueueOptions)}
    assert {"parent_id", "idempotency_key", "unique_while"} <= options
    for name in set(encoding.FIELDS) - {"task", "args", "kwargs"}:  # a run, not an option
        naming = {path for path, words in files.items() if name in words}
        allowed = OPTION_FILES | ALSO.get(name, set())
        if name in PLAIN:
            allowed |= {"sql/enqueue_run_plain.sql"}
        assert naming <= allowed, (name, sorted(naming - allowed))
        # (the part reads run_at and delay by position only, into `due`)
        named = {ENCODER, "pgqueue/enqueue/options.py"} | (set() if name in READ_AS else {READER})
        assert named <= naming, name


def test_plain_is_what_the_plain_statement_inserts() -> None:
    """encoding.plain: a run with any field beyond PLAIN set takes the general statement."""
    base = dataclasses.replace(
        _distinct_row(),
        group_key=None,
        idempotency_key=None,
        run_at=None,
        delay=None,
        parent_id=None,
        unique_key=None,
        unique_while=None,
        unique_for=None,
        replace=False,
        after=None,
        on_dependency_failure=None,
        cancel_running=False,
    )
    assert encoding.plain(base)
    for name, value in (
        ("group_key", "g"),
        ("idempotency_key", "i"),
        ("run_at", datetime.now(UTC)),
        ("delay", 0.0),
        ("parent_id", 1),
        ("unique_key", "u"),
        ("after", (1,)),
    ):
        assert not encoding.plain(dataclasses.replace(base, **{name: value})), name
