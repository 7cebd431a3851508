"""The query loader: every statement lives in sql/NAME.sql and is read once. The current
definition of each database function and view lives in sql/functions/ and sql/views/,
loaded by `definition()` (migrations, the schema test), never by `query()`."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import LiteralString, cast

# psycopg parses a query's placeholders once and caches the result, but only for query
# texts up to 4,096 bytes (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH); a longer one is
# re-parsed in Python on every execution (complete.sql, 4,510 bytes: 16 us a call instead
# of 3, and idle claims were 0.08 ms slower with a claim.sql over the limit). Comments make
# up most of the hot statements' text, so they are dropped when a file is loaded.
PSYCOPG_CACHED_LENGTH = 4096


@cache
def query(name: str) -> LiteralString:
    """The text of sql/<name>.sql without its comments, each {{PART}} in it replaced by
    sql/parts/PART.sql. The files ship inside the wheel as pgqueue.sql. Composing happens
    once per name: the text sent is as if written out in full."""
    text: str = resources.files("pgqueue.sql").joinpath(f"{name}.sql").read_text()
    return cast(LiteralString, compose(strip_comments(text)))  # type: ignore[redundant-cast]


# {{NAME}} in a statement: a rule that several statements share, written once in
# sql/parts/NAME.sql (an expression, or whole lines of a statement).
PART = re.compile(r"\{\{(\w+)\}\}")


def compose(text: str) -> str:
    """`text` with each {{NAME}} replaced by part NAME (itself composed)."""
    return PART.sub(lambda m: part(m.group(1)), text)


@cache
def part(name: str) -> str:
    """sql/parts/<name>.sql without its comments and its final newline, composed."""
    text = resources.files("pgqueue.sql").joinpath("parts", f"{name}.sql").read_text()
    return compose(strip_comments(text)).removesuffix("\n")


def parts() -> list[str]:
    """Every part's name, sorted."""
    return sorted(
        p.name.removesuffix(".sql")
        for p in resources.files("pgqueue.sql").joinpath("parts").iterdir()
        if p.name.endswith(".sql")
    )


def strip_comments(text: str) -> str:
    """`text` without `--` comments (outside quotes) and without the lines they leave
    empty. Our SQL has no dollar quoting or block comments, and no string that spans
    lines."""
    lines = []
    for line in text.splitlines():
        quote = ""
        for i, ch in enumerate(line):
            if quote:
                if ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif line.startswith("--", i):
                line = line[:i].rstrip()
                break
        if line.strip():
            lines.append(line)
    return "\n".join(lines) + "\n"


def names() -> list[str]:
    """The statements `query()` loads: the .sql files at the top of sql/."""
    return sorted(
        p.name.removesuffix(".sql")
        for p in resources.files("pgqueue.sql").iterdir()
        if p.is_file() and p.name.endswith(".sql")
    )


# The folders of sql/ that hold one CREATE OR REPLACE statement per database object.
DEFINITION_KINDS = ("functions", "views")


def definition(path: str) -> str:
    """The current definition of a database function or view, `path` being
    "functions/NAME" or "views/NAME": sql/<path>.sql as written. Comments stay: a
    function's body keeps them, and the server compares them with what it stores."""
    kind, _, name = path.partition("/")
    if kind not in DEFINITION_KINDS or not name or "/" in name:
        raise ValueError(f"not a definition: {path!r} (functions/NAME or views/NAME)")
    return resources.files("pgqueue.sql").joinpath(kind, f"{name}.sql").read_text()


def definitions() -> list[str]:
    """Every definition's path ("functions/NAME", "views/NAME"), sorted."""
    root = resources.files("pgqueue.sql")
    return sorted(
        f"{kind}/{p.name.removesuffix('.sql')}"
        for kind in DEFINITION_KINDS
        for p in root.joinpath(kind).iterdir()
        if p.name.endswith(".sql")
    )
