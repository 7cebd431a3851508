"""The schema that migrations build equals the current definitions in sql/: every function
and view of schema pgqueue has its file in sql/functions/ or sql/views/, every file has its
object, and each file, executed over the migrated schema, changes nothing the server
stores."""

from __future__ import annotations

from typing import Any

import psycopg

from pgqueue.db import sql as _sql

# The server's own rendering of each object, by its identity ("functions/NAME(args)",
# "views/NAME"): a definition re-created from its file must render the same.
RENDERINGS = """
SELECT 'functions/' || p.oid::regprocedure::text, p.proname, pg_get_functiondef(p.oid),
       obj_description(p.oid, 'pg_proc')
  FROM pg_proc p
 WHERE p.pronamespace = 'pgqueue'::regnamespace
   AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                                              AND d.objid = p.oid AND d.deptype = 'e')
UNION ALL
SELECT 'views/' || c.relname, c.relname, pg_get_viewdef(c.oid),
       obj_description(c.oid, 'pg_class')
  FROM pg_class c
 WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind IN ('v', 'm')
"""


def renderings(conn: psycopg.Connection[Any]) -> dict[str, tuple[str, str, str | None]]:
    return {key: (name, text, comment) for key, name, text, comment in conn.execute(RENDERINGS)}


def test_every_function_and_view_has_one_file_and_every_file_an_object(
    conn: psycopg.Connection[Any],
) -> None:
    stored = {f"{key.split('/')[0]}/{name}" for key, (name, _, _) in renderings(conn).items()}
    assert stored == set(_sql.definitions())


def test_every_file_renders_as_the_migrated_object(conn: psycopg.Connection[Any]) -> None:
    before = renderings(conn)
    assert before
    conn.autocommit = False
    try:
        for path in _sql.definitions():
            conn.execute(_sql.definition(path))  # type: ignore[arg-type]
        after = renderings(conn)
    finally:
        conn.rollback()
        conn.autocommit = True
    # a changed signature would add an overload; a changed body or view, another rendering
    assert after.keys() == before.keys()
    changed = [key for key in before if after[key] != before[key]]
    assert not changed, f"sql/ and the migrations disagree on {changed}"


def test_a_definition_path_names_a_function_or_a_view() -> None:
    assert _sql.definition("views/groups").startswith("-- ")
    for bad in ("claim", "tables/runs", "functions/", "functions/a/b"):
        try:
            _sql.definition(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
