"""search_path hijacking (docs/security.md, "search_path"): a role with no pgqueue grant
and only CREATE on schema `public` (every role's default on PostgreSQL 13 and 14) creates
functions, aggregates and operators there that match the calls of pgqueue's SQL better
than the builtins do. Each records that it ran. Then pgqueue does all it does, as a worker
role and as a superuser whose search_path is the default ("$user", public): none of them
may run.

pgqueue's functions pin search_path on themselves (migration 0021); its connections pin
it at startup (pgqueue.db.PIN_SEARCH_PATH); a caller's connection keeps its own, and the
statements pgqueue sends on it qualify what a better match could take."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgqueue
from pgqueue.cli import main
from pgqueue.db import connect as db
from pgqueue.worker.connection import worker_dsn
from tests import pgbouncer
from tests.apps import pinned
from tests.helpers import InProcessWorker, WorkerProcess, scalar, wait_until

pytestmark = pytest.mark.timeout(300)

_serial = itertools.count()

# (name, argument types, return type, the builtin call it stands in for): each is a better
# match than the builtin for a call in pgqueue's SQL (an exact type where the builtin is
# variadic "any", polymorphic, or needs an implicit cast).
FUNCTIONS = [
    ("format", "text, integer", "text", "pg_catalog.format($1, $2)"),
    ("jsonb_build_object", "text, bigint", "jsonb", "pg_catalog.jsonb_build_object($1, $2)"),
    ("jsonb_build_object", "text, integer", "jsonb", "pg_catalog.jsonb_build_object($1, $2)"),
    (
        "jsonb_build_object",
        "text, timestamptz",
        "jsonb",
        "pg_catalog.jsonb_build_object($1, $2)",
    ),
    ("jsonb_build_object", "text, jsonb", "jsonb", "pg_catalog.jsonb_build_object($1, $2)"),
    (
        "jsonb_build_object",
        "text, bigint, text, integer, text, integer, text, integer, text, integer",
        "jsonb",
        "pg_catalog.jsonb_build_object($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    ),
    (
        "concat_ws",
        "text, bigint, integer, integer, integer",
        "text",
        "pg_catalog.concat_ws($1, $2, $3, $4, $5)",
    ),
    ("cardinality", "bigint[]", "integer", "pg_catalog.cardinality($1)"),
    ("cardinality", "text[]", "integer", "pg_catalog.cardinality($1)"),
    ("cardinality", "integer[]", "integer", "pg_catalog.cardinality($1)"),
    ("cardinality", "timestamptz[]", "integer", "pg_catalog.cardinality($1)"),
    ("array_append", "bigint[], bigint", "bigint[]", "pg_catalog.array_append($1, $2)"),
]
SET_RETURNING = [
    ("unnest", "bigint[]", "bigint"),
    ("unnest", "text[]", "text"),
    ("unnest", "integer[]", "integer"),
    ("unnest", "timestamptz[]", "timestamptz"),
    ("unnest", "uuid[]", "uuid"),
]
# (operator, left, right, result, what it computes)
OPERATORS = [
    ("||", "bigint[]", "bigint", "bigint[]", "pg_catalog.array_append($1, $2)"),
    ("||", "text[]", "text", "text[]", "pg_catalog.array_append($1, $2)"),
    ("||", "integer[]", "integer", "integer[]", "pg_catalog.array_append($1, $2)"),
    ("||", "timestamptz[]", "timestamptz", "timestamptz[]", "pg_catalog.array_append($1, $2)"),
    ("||", "text", "bigint", "text", "pg_catalog.textcat($1, $2::text)"),
    ("||", "text", "integer", "text", "pg_catalog.textcat($1, $2::text)"),
    ("||", "integer", "text", "text", "pg_catalog.textcat($1::text, $2)"),
    (
        "/",
        "numeric",
        "double precision",
        "double precision",
        "pg_catalog.float8div($1::float8, $2)",
    ),
    (
        "*",
        "integer",
        "double precision",
        "double precision",
        "pg_catalog.float8mul($1::float8, $2)",
    ),
    (
        "*",
        "double precision",
        "numeric",
        "double precision",
        "pg_catalog.float8mul($1, $2::float8)",
    ),
    ("*", "integer", "interval", "interval", "pg_catalog.interval_mul($2, $1::float8)"),
]
# (aggregate, argument types, state type, state function's body)
AGGREGATES = [
    ("array_agg", "bigint", "bigint[]", "pg_catalog.array_append($1, $2)"),
    ("array_agg", "text", "text[]", "pg_catalog.array_append($1, $2)"),
    ("array_agg", "boolean", "boolean[]", "pg_catalog.array_append($1, $2)"),
    (
        "jsonb_object_agg",
        "text, bigint",
        "jsonb",
        "COALESCE($1, '{}') OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object($2, $3)",
    ),
]


def note(what: str) -> str:
    literal = what.replace("'", "''")
    return f"INSERT INTO public.hostile_log (fn) VALUES ('{literal}');"


def hostile_ddl() -> list[str]:
    """The hostile role's statements (it owns every object they create in `public`)."""
    ddl = [
        "CREATE TABLE public.hostile_log (fn text NOT NULL,"
        " who text NOT NULL DEFAULT current_user)",
        "GRANT INSERT ON public.hostile_log TO PUBLIC",
    ]
    for name, args, returns, call in FUNCTIONS:
        ddl.append(
            f"CREATE FUNCTION public.{name}({args}) RETURNS {returns} LANGUAGE plpgsql AS $$"
            f" BEGIN {note(f'{name}({args})')} RETURN {call}; END $$"
        )
    for name, args, returns in SET_RETURNING:
        ddl.append(
            f"CREATE FUNCTION public.{name}({args}) RETURNS SETOF {returns} LANGUAGE plpgsql"
            f" AS $$ BEGIN {note(f'{name}({args})')}"
            f" RETURN QUERY SELECT pg_catalog.unnest($1); END $$"
        )
    for i, (op, left, right, returns, call) in enumerate(OPERATORS):
        fn = f"public.hostile_op_{i}"
        ddl.append(
            f"CREATE FUNCTION {fn}({left}, {right}) RETURNS {returns} LANGUAGE plpgsql AS $$"
            f" BEGIN {note(f'{left} {op} {right}')} RETURN {call}; END $$"
        )
        ddl.append(
            f"CREATE OPERATOR public.{op} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = {fn})"
        )
    for i, (name, args, state, body) in enumerate(AGGREGATES):
        fn = f"public.hostile_agg_{i}"
        ddl.append(
            f"CREATE FUNCTION {fn}({state}, {args}) RETURNS {state} LANGUAGE plpgsql AS $$"
            f" BEGIN {note(f'{name}({args})')} RETURN {body}; END $$"
        )
        ddl.append(f"CREATE AGGREGATE public.{name}({args}) (SFUNC = {fn}, STYPE = {state})")
    return ddl


def as_role(dsn: str, role: str) -> str:
    params = conninfo_to_dict(dsn) | {"user": role}
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


def unique_role(kind: str) -> str:
    return f"pgq_{kind}_{os.getpid()}_{next(_serial)}"


class Hostile:
    """The hostile role's objects in the test database, and what of them ran."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def ran(self) -> list[tuple[str, str]]:
        """(function, as which role) of every hostile call so far, distinct."""
        with psycopg.connect(self.dsn, autocommit=True) as c:
            rows = c.execute(
                "SELECT DISTINCT fn, who FROM public.hostile_log ORDER BY 1, 2"
            ).fetchall()
        return [(str(fn), str(who)) for fn, who in rows]

    def probe(self) -> None:
        """Make sure the trap works: a call in the default search_path takes the bait."""
        with psycopg.connect(self.dsn, autocommit=True) as c:
            c.execute("SELECT format('%s', 1)")
            row = c.execute("SELECT count(*) FROM public.hostile_log").fetchone()
            assert row is not None and row[0] == 1, "the hostile format() did not run"
            c.execute("TRUNCATE public.hostile_log")


@pytest.fixture
def roles(dsn: str) -> Iterator[Callable[[str], tuple[str, str]]]:
    """roles(kind) -> (role, its DSN): a fresh LOGIN role, dropped at the end."""
    made: list[str] = []

    def make(kind: str) -> tuple[str, str]:
        role = unique_role(kind)
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        made.append(role)
        return role, as_role(dsn, role)

    yield make
    with psycopg.connect(dsn, autocommit=True) as admin:
        for role in reversed(made):
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def hostile(dsn: str, roles: Callable[[str], tuple[str, str]]) -> Hostile:
    """A role with LOGIN and CREATE on `public` (as on PostgreSQL 13 and 14) and no
    pgqueue grant, whose better-matching overloads wait in `public`."""
    role, role_dsn = roles("hostile")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(role)))
    with psycopg.connect(role_dsn, autocommit=True) as c:
        for statement in hostile_ddl():
            c.execute(statement)
    found = Hostile(dsn)
    found.probe()
    return found


def worker_role(dsn: str, roles: Callable[[str], tuple[str, str]]) -> tuple[str, str]:
    """A role with `pgqueue grants ROLE --as worker`, as a deployment would make it."""
    role, role_dsn = roles("worker")
    with pytest.raises(SystemExit) as exc:
        main(["grants", role, "--as", "worker", "--apply", "--dsn", dsn])
    assert exc.value.code == 0
    return role, role_dsn


def exercise_sql(dsn: str) -> None:
    """Every SQL entry point, from a plain connection with the default search_path."""
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SHOW search_path").fetchone() == ('"$user", public',)

        def one(query: str, params: Any = None) -> Any:
            row = c.execute(query, params).fetchone()
            assert row is not None
            return row[0]

        later = one(
            "SELECT pgqueue.enqueue('pinned.echo', '[1]', '{}', run_at => now() + interval '1 h',"
            " idempotency_key => %s, group_key => 'g', timeout_seconds => 30)",
            (f"sql-{dsn}",),
        )
        again = one(
            "SELECT pgqueue.enqueue('pinned.echo', '[1]', idempotency_key => %s)", (f"sql-{dsn}",)
        )
        assert again == later
        one("SELECT pgqueue.enqueue('pinned.capped', '[2]', queue => 'capped')")
        unique = (
            '[{"task": "pinned.echo", "queue": "default", "priority": 0, "args": [3],'
            ' "kwargs": {}, "max_attempts": 3, "unique_key": "u1", "unique_while": "active",'
            ' "unique_for": 60, "replace": true}]'
        )
        for _ in range(2):
            one("SELECT run_id FROM pgqueue.enqueue_unique(%s::jsonb, NULL, '{}', true)", (unique,))
        one("SELECT pgqueue.emit_event('pinned.nobody', 'k', '{\"a\": [1]}')")
        one("SELECT pgqueue.emit_event('pinned.nobody', 'k', '{}', delay => 5)")
        assert one("SELECT pgqueue.cancel(%s, true, 'no longer needed')", (later,)) is True
        assert one("SELECT pgqueue.retry(%s)", (later,)) is True
        assert one("SELECT pgqueue.cancel(%s)", (later,)) is True
        # a batch enqueued, sealed and finished from SQL: the trigger's batch_note() and
        # batch_flush(), then batch_settle() enqueues its callback
        batch = one(
            "INSERT INTO pgqueue.batch_heads (on_complete, queue, priority, max_attempts,"
            " kwargs) VALUES ('pinned.on_batch_done', 'default', 0, 3, '{}') RETURNING id"
        )
        member = '[{"task": "pinned.echo", "queue": "default", "priority": 0, "args": [4],'
        member += ' "kwargs": {}, "max_attempts": 3, "run_at": "2000-01-01T00:00:00Z"}]'
        members = [
            one(
                "SELECT run_id FROM pgqueue.enqueue_unique(%s::jsonb, %s, '{}', false)",
                (member, batch),
            )
            for _ in range(2)
        ]
        one(
            "UPDATE pgqueue.batch_heads SET total = 2, sealed_at = now() WHERE id = %s"
            " RETURNING id",
            (batch,),
        )
        for run_id in members:
            assert one("SELECT pgqueue.cancel(%s)", (run_id,)) is True
        assert one("SELECT callback_run_id FROM pgqueue.batch_heads WHERE id = %s", (batch,))
        # a queue that gains limits (trigger queue_limits_changed) and a claim of it
        queue = f"sql_{abs(hash(dsn)) % 10**8}"
        c.execute(
            "INSERT INTO pgqueue.queues (name, concurrency, group_rate_limit, group_rate_period,"
            " rate_limit, rate_period) VALUES (%s, 4, 100, 1, 100, 1)",
            (queue,),
        )
        for i in range(3):
            one(
                "SELECT pgqueue.enqueue('pinned.echo', '[5]', queue => %s, group_key => %s)",
                (queue, f"g{i}"),
            )
        worker = one(
            "INSERT INTO pgqueue.workers (id, host, pid, queues, tasks, concurrency, version)"
            " VALUES (gen_random_uuid(), 'sql', 1, %s, '{}', 1, 'sql') RETURNING id",
            ([queue],),
        )
        claimed = c.execute(
            "SELECT id FROM pgqueue.claim_limited(%s, %s, 10, 30)", (queue, worker)
        ).fetchall()
        assert len(claimed) == 3
        assert one("SELECT pgqueue.cancel(%s)", (claimed[0][0],)) is True  # keeps its permit
        c.execute(
            "UPDATE pgqueue.queues SET concurrency = NULL, group_rate_limit = NULL,"
            " group_rate_period = NULL WHERE name = %s",
            (queue,),
        )
        # the helpers, called directly, and the views that call them
        one("SELECT pgqueue.rate_opens(ARRAY[now()], ARRAY[5], 1, 60, now())")
        one(
            "SELECT pgqueue.rate_log_add(ARRAY[now() - interval '2 min', now()], ARRAY[1, 1],"
            " 2, now(), 60)"
        )
        one("SELECT pgqueue.rate_used(ARRAY[now()], ARRAY[1], now() - interval '1 min')")
        one("SELECT pgqueue.latency_bin(0.25)")
        c.execute("SELECT pgqueue.tally_upto()")
        one("SELECT pgqueue.json_too_deep('[[1]]', 256)")
        c.execute("SELECT pgqueue.claim_next_priority(%s, -32769, NULL, NULL, 0)", (queue,))
        one("SELECT count(*) FROM pgqueue.queue_stats")
        one("SELECT count(*) FROM pgqueue.batches")


def exercise_python(app: pgqueue.App, tag: str) -> list[pgqueue.RunHandle]:
    """The Python API's writes, on `app`'s own connections; the handles of the runs a
    worker is to finish, the flows among them waiting for event pinned.go, key `tag`."""
    by_name = app.enqueue_by_name
    handles = [by_name("pinned.echo", [i], idempotency_key=f"{tag}-{i}") for i in range(3)]
    handles += [by_name("pinned.echo", [9], unique_key=f"{tag}-u") for _ in range(2)]
    with app.batch(on_complete=pinned.on_batch_done) as batch:
        handles += [by_name("pinned.echo", [i]) for i in range(5)]
    assert batch.id is not None
    handles += [by_name("pinned.capped", [i], queue="capped") for i in range(6)]
    handles += [
        by_name("pinned.group_rated", [i], queue="group_rated", group=f"g{i % 3}") for i in range(9)
    ]
    handles += [
        by_name("pinned.ordered", [i], queue="ordered", group=f"g{i % 2}") for i in range(6)
    ]
    handles += [by_name("pinned.rated", [i], queue="rated") for i in range(6)]
    handles += [by_name("pinned.flow", [tag]) for _ in range(2)]
    late = by_name("pinned.echo", [0], delay=3600)
    assert app.cancel(late.id, reason="not needed")
    assert app.retry(late.id)
    assert app.cancel(late.id)
    app.emit_event("pinned.nobody", key="k", payload={"a": 1})
    assert app.get_run(late.id).state == "canceled"
    return handles


def test_no_hostile_overload_runs_as_the_worker_or_a_superuser(
    dsn: str, hostile: Hostile, roles: Callable[[str], tuple[str, str]]
) -> None:
    _, role_dsn = worker_role(dsn, roles)
    exercise_sql(dsn)  # a superuser
    exercise_sql(role_dsn)
    producer, worker_app = pgqueue.App(dsn), pgqueue.App(role_dsn)
    try:
        handles = exercise_python(producer, "super") + exercise_python(worker_app, "worker")
        with (
            WorkerProcess(role_dsn, "tests.apps.pinned:app", "--concurrency", "8").wait_ready(),
            WorkerProcess(dsn, "tests.apps.pinned:app", "--concurrency", "8").wait_ready(),
        ):
            flows = [h for h in handles if producer.get_run(h.id).task == "pinned.flow"]
            for flow in flows:
                wait_until(
                    lambda f=flow: producer.get_run(f.id).state == "waiting",
                    30,
                    message=f"flow {flow.id} to wait for its event",
                )
            producer.emit_event("pinned.go", key="super", payload={"ok": 1})
            with psycopg.connect(role_dsn, autocommit=True) as c:
                c.execute("SELECT pgqueue.emit_event('pinned.go', 'worker', '{\"ok\": 2}')")
            for handle in handles:
                handle.wait(timeout=60)
            unsettled = (
                "SELECT count(*) FROM pgqueue.batch_heads b LEFT JOIN pgqueue.runs r"
                " ON r.id = b.callback_run_id WHERE r.state IS DISTINCT FROM 'succeeded'"
            )
            wait_until(lambda: scalar(dsn, unsettled) == 0, 60, message="the batches' callbacks")
            # the dashboard's and the CLI's reads, through the views
            assert producer.list_runs(limit=5)
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE state = 'failed'") == 0
        progress = scalar(dsn, "SELECT progress FROM pgqueue.runs WHERE id = %s", (flows[0].id,))
        assert progress["done"] == 3
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.group_rates") > 0
    finally:
        producer.close()
        worker_app.close()
    assert hostile.ran() == []


def test_statements_on_a_callers_connection_resolve_no_hostile_overload(
    dsn: str, hostile: Hostile
) -> None:
    """pgqueue leaves a caller's connection (conn=, joining its transaction) as it is, its
    search_path included; the statements it sends there qualify what a better match in
    another schema could take."""
    app = pgqueue.App(dsn)

    @app.task(name="pinned.local")
    def local(n: int) -> int:
        return n

    try:
        with psycopg.connect(dsn) as c:
            by_name = app.enqueue_by_name
            by_name("pinned.echo", [1], conn=c)
            by_name("pinned.echo", [1], conn=c, idempotency_key="caller-1", delay=5)
            local.options(conn=c).enqueue_many([(i,) for i in range(3)])
            local.options(conn=c, delay=60).enqueue_many([(i,) for i in range(3)])
            local.options(conn=c, unique_key=lambda n: f"caller-u{n}").enqueue_many([(1,), (2,)])
            with app.batch(on_complete=local, conn=c):
                local.options(conn=c).enqueue_many([(i,) for i in range(3)])
            app.emit_event("pinned.nobody", key="k", payload=[1], conn=c)
            app.emit_event("pinned.nobody", key="k", payload=[1], delay=5, conn=c)
            assert c.execute("SHOW search_path").fetchone() == ('"$user", public',)
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 13
    finally:
        app.close()
    assert hostile.ran() == []


PINNED = "pg_catalog, pgqueue, pg_temp"


def show(conn: psycopg.Connection[Any], setting: str = "search_path") -> str:
    """SHOW setting; a search_path with a space after each comma, however it was set."""
    row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(setting))).fetchone()
    assert row is not None
    value = str(row[0])
    return ", ".join(p.strip() for p in value.split(",")) if setting == "search_path" else value


def test_every_kind_of_pgqueue_connection_pins_search_path(dsn: str) -> None:
    app = pgqueue.App(dsn)
    try:
        # The App's pools keep the session's own search_path: they are the caller's
        # connections too (app.connection() runs the caller's SQL), and pgqueue's
        # statements there resolve no planted overload
        # (test_no_hostile_overload_runs_as_the_worker_or_a_superuser goes through them).
        with app.connection() as c:
            assert show(c) == '"$user", public'

        async def from_the_async_pool() -> str:
            async with app.async_connection() as c:
                row = await (await c.execute("SHOW search_path")).fetchone()
                assert row is not None
                return str(row[0])

        assert asyncio.run(from_the_async_pool()) == '"$user", public'
        # one-off connections: the CLI's checks, a worker's registration, migrate
        with db.connect(dsn) as c:
            assert show(c) == PINNED
        # the waiters' shared connection
        with psycopg.connect(db.pinned_dsn(app.dsn, app.pooler)) as c:
            assert show(c) == PINNED
        # a worker's pool, lease keeper and listener: the worker's DSN
        with InProcessWorker(app, concurrency=1) as worker:
            with psycopg.connect(worker.dsn) as c:
                assert show(c) == PINNED
                assert show(c, "plan_cache_mode") == "force_generic_plan"

            async def from_the_worker_pool() -> str:
                async with worker._pool.connection() as c:
                    row = await (await c.execute("SHOW search_path")).fetchone()
                    assert row is not None
                    return str(row[0]).replace(",", ", ")

            assert worker._loop is not None
            shown = asyncio.run_coroutine_threadsafe(from_the_worker_pool(), worker._loop)
            assert shown.result(10) == PINNED
    finally:
        app.close()


def test_the_dsns_own_options_and_pgoptions_are_kept(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_options = make_conninfo(dsn, options="-c statement_timeout=4321")
    for target in (db.pinned_dsn(with_options, None), worker_dsn(with_options, None)):
        with psycopg.connect(target) as c:
            assert (show(c), show(c, "statement_timeout")) == (PINNED, "4321ms")
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=1234")
    for target in (db.pinned_dsn(dsn, None), worker_dsn(dsn, None)):
        with psycopg.connect(target) as c:
            assert (show(c), show(c, "lock_timeout")) == (PINNED, "1234ms")


@pytest.mark.slow
def test_through_a_pooler_the_roles_own_setting_pins_search_path(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """PgBouncer (1.18) refuses startup parameters: through it, pgqueue's connections get
    the role's search_path, which pgqueue checks (one warning line) and which
    `ALTER ROLE ... SET search_path` pins without any SET that could reach another of the
    pooler's clients."""
    caplog.set_level(logging.WARNING, logger="pgqueue")
    database = sql.Identifier(str(conninfo_to_dict(dsn)["dbname"]))
    # what a worker, a CLI command or a migration opens first
    with (
        pgbouncer.running(dsn, "transaction") as through,
        db.connect(through, pooler="transaction") as c,
    ):
        assert show(c) == '"$user", public'
    warned = [r.getMessage() for r in caplog.records if "search_path" in r.getMessage()]
    assert len(warned) == 1 and "ALTER ROLE" in warned[0], warned
    assert f"search_path = {PINNED}" in warned[0]

    # a pooler told to ignore the startup parameter drops it unseen: the check sees that
    caplog.clear()
    ignoring = "ignore_startup_parameters = options\n"
    with pgbouncer.running(dsn, "session", extra=ignoring) as through:
        db.connect(through).close()
    warned = [r.getMessage() for r in caplog.records if "search_path" in r.getMessage()]
    assert len(warned) == 1 and "did not apply" in warned[0], warned

    caplog.clear()
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} SET search_path = {}").format(
                database, sql.SQL(PINNED)
            )
        )
    try:
        for mode, pooler in (("transaction", "transaction"), ("session", None)):
            with (
                pgbouncer.running(dsn, mode) as through,
                db.connect(through, pooler=pooler) as c,
            ):
                assert show(c) == PINNED
                sessions = "SELECT count(*) FROM pg_settings WHERE source = 'session'"
                assert c.execute(sessions).fetchone() == (0,)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} RESET search_path").format(database)
            )
    messages = [r.getMessage() for r in caplog.records]
    assert not any("cannot pin search_path" in m for m in messages), messages
    # the undeclared pooler (session mode, pooler=None) refused the startup parameter
    assert any("refused the startup parameter" in m for m in messages), messages


# Functions left without SET search_path, for speed (the planner inlines latency_bin, which
# a SET clause stops; a call of rate_used costs a third more with one): each names every
# function, operator and type it uses with its schema.
QUALIFIED = {"latency_bin", "rate_used"}
_LITERAL = re.compile(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?(?:e[-+]?\d+)?\b", re.I)
_QUALIFIED_OPERATOR = re.compile(r"OPERATOR\(pg_catalog\.[^)\s]+\)")
_CALL = re.compile(r"(?<![\w.])(\w+)\s*\(")
_SYNTAX = {"coalesce", "greatest", "least", "nullif", "from", "select", "as"}


def unqualified(body: str) -> list[str]:
    """What in an SQL function's body is resolved through the search_path: an unqualified
    call, cast or operator."""
    text = _QUALIFIED_OPERATOR.sub(" ", _LITERAL.sub(" 0 ", body))
    found = [
        f"call {m.group(1)}"
        for m in _CALL.finditer(text)
        if m.group(1).lower() not in _SYNTAX and not re.search(r"\bAS\s+$", text[: m.start()], re.I)
    ]
    found += [f"cast {m.group(0)}" for m in re.finditer(r"::\s*(?!pg_catalog\.)\w+", text)]
    found += [f"operator {m.group(0)}" for m in re.finditer(r"[-+*/<>=~!@#%^&|?]+", text)]
    return found


def test_every_function_pins_search_path_or_qualifies_every_name(
    conn: psycopg.Connection[Any],
) -> None:
    rows = conn.execute(
        "SELECT p.proname, p.proconfig, p.prosrc, l.lanname FROM pg_proc p"
        " JOIN pg_language l ON l.oid = p.prolang"
        " WHERE p.pronamespace = 'pgqueue'::regnamespace"
    ).fetchall()
    assert {name for name, *_ in rows} >= QUALIFIED
    for name, config, body, language in rows:
        if name in QUALIFIED:
            assert (config, language) == (None, "sql"), name
            assert unqualified(body) == [], name
        else:
            assert config == [f"search_path={PINNED}"], name
    # latency_bin's reason holds: the planner inlines it
    plan = conn.execute(
        "EXPLAIN (VERBOSE, FORMAT JSON) SELECT pgqueue.latency_bin(g) FROM generate_series(1, 3) g"
    ).fetchone()
    assert plan is not None
    assert "latency_bin" not in json.dumps(plan[0]), plan[0]
    # and the check sees an unqualified name
    assert unqualified("SELECT floor(x * 2)::int2 FROM unnest(a) AS u(s)") == [
        "call floor",
        "call unnest",
        "cast ::int2",
        "operator *",
    ]


def test_grants_prints_the_role_setting_for_poolers_and_apply_leaves_it_out(
    dsn: str, roles: Callable[[str], tuple[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    role, role_dsn = roles("pooled")
    with pytest.raises(SystemExit) as exc:
        main(["grants", role, "--as", "producer", "--dsn", dsn])
    assert exc.value.code == 0
    printed = capsys.readouterr().out.splitlines()
    setting = f'-- ALTER ROLE "{role}" SET search_path = {PINNED};'
    assert printed[-1] == setting, printed[-3:]
    role_settings = "SELECT count(*) FROM pg_db_role_setting WHERE setrole = %s::regrole"
    main_args = ["grants", role, "--as", "producer", "--apply", "--dsn", dsn]
    with pytest.raises(SystemExit) as exc:
        main(main_args)
    assert exc.value.code == 0
    assert scalar(dsn, role_settings, (role,)) == 0
    # run as printed (by a superuser), it pins the role's sessions
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(setting.removeprefix("-- ").rstrip(";"))
    with psycopg.connect(role_dsn) as c:
        assert show(c) == PINNED
