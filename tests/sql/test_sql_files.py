"""The statements in sql/: how they are loaded."""

from __future__ import annotations

from psycopg import _queries

from pgqueue import _sql


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
