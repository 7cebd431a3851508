"""The privileges each kind of role needs (`pgqueue grants ROLE --as KIND`), computed from
the catalog of the migrated schema, and the worker's start-up check that it holds them.

- reader: SELECT on every table and view (inspection: runs list/show, queues, workers).
- producer: a reader that also enqueues (Python API and pgqueue.enqueue() in SQL), waits
  for results (RunHandle.wait marks the run to notify) and emits events (which wake
  waiting runs): INSERT and UPDATE on runs, INSERT on events, INSERT and UPDATE on
  batch_heads (app.batch()), the sequences, and EXECUTE on enqueue, emit_event,
  enqueue_unique (unique keys) and batch_settle (sealing a batch).
- worker: what `pgqueue worker` does and what the CLI's actions (cancel, retry, pause,
  prune...) do: on each table what its statements do (WORKER_TABLES), the sequences, and
  EXECUTE on every function.
- owner: ownership of the schema and of every object in it, which `pgqueue migrate` needs
  (only an owner may ALTER or DROP).

Every statement is idempotent. The ALTER DEFAULT PRIVILEGES statements apply to objects
that the schema's owner (the migrating role) creates later, so that a migration adding a
table does not break a running deployment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, LiteralString, cast

import psycopg
from psycopg import sql

from pgqueue.db import sql as _sql
from pgqueue.errors import NotMigrated, UserError

SCHEMA = "pgqueue"
KINDS = ("worker", "producer", "reader", "owner")

DML = ("SELECT", "INSERT", "UPDATE", "DELETE")
# Tables a producer writes, and with what; it reads every table.
PRODUCER_WRITES = {
    "runs": ("SELECT", "INSERT", "UPDATE"),
    "events": ("SELECT", "INSERT"),
    "batch_heads": ("SELECT", "INSERT", "UPDATE"),  # app.batch() opens and seals its batch
}
PRODUCER_FUNCTIONS = ("enqueue", "emit_event", "enqueue_unique", "batch_settle")
# What the worker and the CLI's actions do to each table (sql/*.sql and the schema's
# functions; tests/db/test_grants.py checks the statements against it). SELECT ... FOR UPDATE
# needs UPDATE, and so does INSERT ... ON CONFLICT DO UPDATE; steps and run_errors go with
# their run (ON DELETE CASCADE). Only migrations write the schema revision. A table this
# list does not know (a later migration's) gets all four, as its default privileges give.
WORKER_TABLES = {
    "alembic_version": ("SELECT",),
    # a dashboard run with the worker's role records its actions; the pruner deletes old ones
    "audit": ("SELECT", "INSERT", "DELETE"),
    "events": DML,
    "finished_totals": ("SELECT", "INSERT", "UPDATE"),  # the tally adds to it
    "group_backoffs": DML,  # RetryAfter(scope="group") adds them; a resume deletes them
    "group_rates": DML,
    "queues": ("SELECT", "INSERT", "UPDATE"),
    "run_errors": ("SELECT", "INSERT"),
    "runs": DML,
    "schedules": ("SELECT", "INSERT", "UPDATE"),
    "steps": ("SELECT", "INSERT", "UPDATE"),
    "workers": DML,
    "zombie_permits": DML,
}


@dataclass(frozen=True)
class SchemaObject:
    kind: str  # schema, table, view, sequence, function
    name: str
    args: str  # a function's identity arguments
    linked: bool  # a sequence owned by a table's column
    owner: str
    held: tuple[str, ...]  # privileges the connected role holds on it

    def target(self) -> sql.Composable:
        """The object as written after ON in a GRANT (`TABLE pgqueue.runs`...)."""
        if self.kind == "schema":
            return sql.SQL("SCHEMA {}").format(sql.Identifier(self.name))
        name = sql.Identifier(SCHEMA, self.name)
        if self.kind == "function":
            # pg_get_function_identity_arguments: the server's own rendering of the types
            return sql.SQL("FUNCTION {}({})").format(name, _keyword(self.args))
        return sql.SQL("SEQUENCE {}" if self.kind == "sequence" else "TABLE {}").format(name)


def objects(conn: psycopg.Connection[Any]) -> list[SchemaObject]:
    rows = conn.execute(_sql.query("schema_objects")).fetchall()
    found = [SchemaObject(r[0], r[1], r[2], r[3], r[4], tuple(r[5])) for r in rows]
    if not any(o.kind == "schema" for o in found):
        raise NotMigrated("this database has no pgqueue schema: run `pgqueue migrate` first")
    return found


def needed(obj: SchemaObject, kind: str) -> tuple[str, ...]:
    """The privileges a role of `kind` (not owner) needs on `obj`."""
    if obj.kind == "schema":
        return ("USAGE",)
    if obj.kind == "view":
        return ("SELECT",)
    if obj.kind == "table":
        if kind == "reader":
            return ("SELECT",)
        if kind == "producer":
            return PRODUCER_WRITES.get(obj.name, ("SELECT",))
        return WORKER_TABLES.get(obj.name, DML)
    if obj.kind == "sequence":
        return () if kind == "reader" else ("USAGE",)
    if kind == "worker" or (kind == "producer" and obj.name in PRODUCER_FUNCTIONS):
        return ("EXECUTE",)
    return ()


# For objects created later by the schema's owner: ALTER DEFAULT PRIVILEGES ... GRANT
# {privileges} ON {objects}. New tables get the kind's broadest table privileges, since a
# later migration's table is one its release's code writes.
DEFAULTS: dict[str, tuple[tuple[str, str], ...]] = {
    "reader": (("SELECT", "TABLES"),),
    "producer": (("SELECT", "TABLES"), ("USAGE", "SEQUENCES"), ("EXECUTE", "FUNCTIONS")),
    "worker": (
        ("SELECT, INSERT, UPDATE, DELETE", "TABLES"),
        ("USAGE", "SEQUENCES"),
        ("EXECUTE", "FUNCTIONS"),
    ),
}


def statements(conn: psycopg.Connection[Any], role: str, kind: str) -> list[sql.Composed]:
    """The statements that give `role` what a `kind` role needs, for the schema as it is
    in `conn`'s database."""
    if kind not in KINDS:
        raise UserError(f"unknown role kind {kind!r}: use one of {', '.join(KINDS)}")
    found = objects(conn)
    who = sql.Identifier(role)
    if kind == "owner":
        return [
            sql.SQL("ALTER {} OWNER TO {}").format(_alter_target(o), who)
            for o in found
            if o.kind != "sequence" or not o.linked
        ]
    out = [
        sql.SQL("GRANT {} ON {} TO {}").format(
            sql.SQL(", ").join(_keyword(p) for p in privileges), o.target(), who
        )
        for o in found
        if (privileges := needed(o, kind))
    ]
    owner = next(o.owner for o in found if o.kind == "schema")
    for granted, what in DEFAULTS[kind]:
        out.append(
            sql.SQL(
                "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA {} GRANT {} ON {} TO {}"
            ).format(
                sql.Identifier(owner),
                sql.Identifier(SCHEMA),
                _keyword(granted),
                _keyword(what),
                who,
            )
        )
    return out


def search_path_setting(role: str) -> sql.Composed:
    """The role setting that pins search_path on the role's sessions: what pgqueue's
    connections ask for at startup (pgqueue.db.PIN_SEARCH_PATH), for connections through
    a pooler, which does not pass a startup parameter on. Needs a superuser (or CREATEROLE
    with ADMIN on the role), so `--apply` leaves it out (docs/security.md)."""
    return sql.SQL("ALTER ROLE {} SET search_path = pg_catalog, pgqueue, pg_temp").format(
        sql.Identifier(role)
    )


def _keyword(text: str) -> sql.SQL:
    """Text composed as SQL as it is: this module's privilege and object-class keywords,
    and a function's argument types as the server itself rendered them."""
    return sql.SQL(cast(LiteralString, text))  # type: ignore[redundant-cast]


def _alter_target(obj: SchemaObject) -> sql.Composable:
    if obj.kind == "view":
        return sql.SQL("VIEW {}").format(sql.Identifier(SCHEMA, obj.name))
    return obj.target()


def missing(conn: psycopg.Connection[Any], kind: str) -> list[str]:
    """What the connected role lacks of a `kind` role's privileges ('INSERT on table
    pgqueue.runs', ...)."""
    lacking = []
    for o in objects(conn):
        absent = [p for p in needed(o, kind) if p not in o.held]
        if absent:
            where = o.name if o.kind == "schema" else f"{SCHEMA}.{o.name}"
            lacking.append(f"{', '.join(absent)} on {o.kind} {where}")
    return lacking
