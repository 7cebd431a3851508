"""Enqueue: options, bulk, idempotency, transactions, validation, bad input."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import _sql


@pytest.fixture
def send(app: pgqueue.App) -> pgqueue.Task[Any, Any]:
    @app.task(queue="emails", max_attempts=5, priority=2)
    def send_email(to: str, subject: str = "hi") -> str:
        return to

    return send_email


def test_enqueue_stores_arguments_and_task_defaults(app: pgqueue.App, send: Any) -> None:
    run = app.get_run(send.enqueue("a@b.c", subject="yo").id)
    assert (run.task, run.queue, run.state, run.priority, run.max_attempts) == (
        send.name,
        "emails",
        "queued",
        2,
        5,
    )
    assert (run.args, run.kwargs, run.attempt) == (["a@b.c"], {"subject": "yo"}, 0)


def test_options_override_defaults(app: pgqueue.App, send: Any) -> None:
    h = send.options(queue="x", priority=-5, max_attempts=1, timeout=3, group="t-7").enqueue("a")
    run = app.get_run(h.id)
    assert (run.queue, run.priority, run.max_attempts, run.timeout_seconds, run.group_key) == (
        "x",
        -5,
        1,
        3.0,
        "t-7",
    )


def test_delay_and_run_at_make_scheduled_runs(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any]
) -> None:
    delayed = app.get_run(send.options(delay=60).enqueue("a").id)
    at = datetime.now(UTC) + timedelta(hours=1)
    later = app.get_run(send.options(run_at=at).enqueue("a").id)
    past = app.get_run(send.options(run_at=at - timedelta(days=1)).enqueue("a").id)
    assert (delayed.state, later.state, past.state) == ("scheduled", "scheduled", "queued")
    now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    assert timedelta(seconds=55) < delayed.run_at - now < timedelta(seconds=65)
    assert abs((later.run_at - at).total_seconds()) < 0.001
    with pytest.raises(ValueError, match="timezone-aware"):
        send.options(run_at=datetime.now()).enqueue("a")


def test_enqueue_many_one_statement_keeps_order(app: pgqueue.App, send: Any) -> None:
    handles = send.enqueue_many([("a",), {"to": "b", "subject": "s"}, ["c", "t"]])
    runs = [app.get_run(h.id) for h in handles]
    assert [(r.args, r.kwargs) for r in runs] == [
        (["a"], {}),
        ([], {"to": "b", "subject": "s"}),
        (["c", "t"], {}),
    ]
    assert handles[0].id < handles[1].id < handles[2].id
    assert send.enqueue_many([]) == []


def test_idempotency_key_yields_one_run(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any]
) -> None:
    first = send.options(idempotency_key="welcome:42").enqueue("a")
    second = send.options(idempotency_key="welcome:42").enqueue("b")
    assert first.id == second.id and first.created and not second.created
    count = conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone()
    assert count == (1,)


def test_idempotent_enqueue_from_sql_returns_existing(conn: psycopg.Connection[Any]) -> None:
    a = conn.execute("SELECT pgqueue.enqueue('t', idempotency_key => 'k')").fetchone()
    b = conn.execute("SELECT pgqueue.enqueue('t', idempotency_key => 'k')").fetchone()
    assert a == b


def test_transactional_enqueue_rolls_back_with_the_caller(
    app: pgqueue.App, send: Any, dsn: str
) -> None:
    with psycopg.connect(dsn) as c:
        with pytest.raises(RuntimeError), c.transaction():
            h = send.options(conn=c).enqueue("a")
            raise RuntimeError("the view failed")
        with pytest.raises(pgqueue.RunNotFound):
            app.get_run(h.id)
        with c.transaction():
            h = send.options(conn=c).enqueue("a")
            # not visible to other sessions before commit
            with pytest.raises(pgqueue.RunNotFound):
                app.get_run(h.id)
        assert app.get_run(h.id).state == "queued"


def test_notify_is_sent_once_per_queue_at_commit(app: pgqueue.App, send: Any, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn) as c:
        listener.execute("LISTEN pgqueue_queued")
        with c.transaction():
            send.options(conn=c).enqueue_many([("a",)] * 50)
            send.options(conn=c, queue="other").enqueue("b")
            assert list(listener.notifies(timeout=0.2)) == []  # nothing before commit
        notes = list(listener.notifies(timeout=0.5))
        assert sorted(n.payload for n in notes) == ["emails", "other"]


def test_notify_off_sends_nothing(dsn: str) -> None:
    app = pgqueue.App(dsn, notify=False)

    @app.task
    def t() -> None: ...

    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgqueue_queued")
        t.enqueue()
        assert list(listener.notifies(timeout=0.3)) == []
    app.close()


def test_non_json_arguments_are_rejected_and_nothing_is_stored(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any]
) -> None:
    with pytest.raises(TypeError, match="must be JSON"):
        send.enqueue(object())
    with pytest.raises(TypeError, match="must be JSON"):
        send.enqueue_many([("ok",), (datetime.now(),)])
    with pytest.raises(TypeError, match="must be JSON"):
        send.enqueue(float("nan"))
    # JSON, but not jsonb: a NUL character (its escape, not a backslash before "u0000")
    with pytest.raises(pgqueue.InvalidArguments, match=r"^arguments of .* NUL character"):
        send.enqueue("a\x00b")
    with pytest.raises(pgqueue.InvalidArguments, match="NUL character"):
        send.enqueue_many([("ok",), ({"k": "\\\x00"},)])
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (0,)
    send.enqueue(r"\u0000")
    assert conn.execute("SELECT args FROM pgqueue.runs").fetchone() == ([r"\u0000"],)


def test_wrong_arity_is_rejected_at_enqueue(send: Any) -> None:
    with pytest.raises(TypeError, match="send_email"):
        send.enqueue()
    with pytest.raises(TypeError, match="unexpected keyword"):
        send.enqueue("a", nope=1)


def test_oversized_payload_is_rejected(dsn: str) -> None:
    app = pgqueue.App(dsn, max_payload_bytes=1000)

    @app.task
    def t(blob: str) -> None: ...

    with pytest.raises(pgqueue.PayloadTooLarge, match="1,000-byte limit"):
        t.enqueue("x" * 2000)
    app.close()


def test_validator_callable_and_pydantic(app: pgqueue.App) -> None:
    def positive(n: int) -> None:
        if n <= 0:
            raise ValueError("n must be positive")

    @app.task(validator=positive)
    def a(n: int) -> None: ...

    pydantic = pytest.importorskip("pydantic")

    class Email(pydantic.BaseModel):
        to: str
        retries: int = 0

    @app.task(validator=Email)
    def b(to: str, retries: int = 0) -> None: ...

    a.enqueue(1)
    b.enqueue("x@y.z", retries=2)
    with pytest.raises(pgqueue.ValidationError, match="n must be positive"):
        a.enqueue(0)
    with pytest.raises(pgqueue.ValidationError, match="retries"):
        b.enqueue("x@y.z", retries="many")


def test_unknown_task_by_name(app: pgqueue.App) -> None:
    with pytest.raises(pgqueue.UnknownTask, match="'nope'"):
        app.enqueue("nope")


def test_dsn_errors_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    with pytest.raises(pgqueue.ConfigError, match="no database configured"):
        _ = pgqueue.App().dsn
    with pytest.raises(pgqueue.ConfigError, match="invalid DSN"):
        pgqueue.App("this is not a dsn")
    bad = pgqueue.App("postgresql://nobody@127.0.0.1:1/nope?connect_timeout=2")

    @bad.task
    def t() -> None: ...

    with pytest.raises(pgqueue.ConfigError, match="cannot connect") as info:
        t.enqueue()
    assert "\n" not in str(info.value)


def test_one_caller_at_a_time_keeps_to_one_pooled_connection(dsn: str) -> None:
    """The App's pools open with their first connection ready. A first request made while
    that connection was still being opened grew the pool by one (a few ms later), and
    psycopg_pool hands its connections out in turn: a caller enqueueing one run at a time
    then alternated between two backends for good, about 80 us slower per call
    (bench/RESULTS.md, session 11). Watched over `window` seconds of back-to-back requests."""
    window = 0.3
    app = pgqueue.App(dsn)

    def backends() -> set[int]:
        seen, deadline = set(), time.monotonic() + window
        while time.monotonic() < deadline:
            with app.connection() as c:
                seen.add(c.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        return seen

    async def backends_async() -> set[int]:
        seen, deadline = set(), time.monotonic() + window
        while time.monotonic() < deadline:
            async with app.async_connection() as c:
                row = await (await c.execute("SELECT pg_backend_pid()")).fetchone()
                seen.add(row[0])  # type: ignore[index]
        await app.aclose()
        return seen

    try:
        assert len(backends()) == 1
        assert len(asyncio.run(backends_async())) == 1
    finally:
        app.close()


def test_unmigrated_database_says_what_to_do(server_params: dict[str, Any]) -> None:
    from psycopg import sql

    params = {k: v for k, v in server_params.items() if v is not None}
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        admin.execute("DROP DATABASE IF EXISTS pgqueue_unmigrated")
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier("pgqueue_unmigrated")))
    try:
        from psycopg.conninfo import make_conninfo

        dsn = make_conninfo(dbname="pgqueue_unmigrated", **{k: str(v) for k, v in params.items()})
        app = pgqueue.App(dsn)

        @app.task
        def t() -> None: ...

        with pytest.raises(pgqueue.NotMigrated, match="pgqueue migrate"):
            t.enqueue()
        with pytest.raises(pgqueue.NotMigrated, match="pgqueue migrate"):
            app.check_schema()
        app.close()
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
            admin.execute("DROP DATABASE IF EXISTS pgqueue_unmigrated WITH (FORCE)")


def test_cancel_and_retry(app: pgqueue.App, send: Any) -> None:
    h = send.enqueue("a")
    assert app.cancel(h.id) is True
    assert app.cancel(h.id) is False
    assert app.get_run(h.id).state == "canceled"
    with pytest.raises(pgqueue.RunCanceled):
        h.wait(timeout=1)
    assert app.retry(h.id) is True
    assert app.get_run(h.id).state == "queued"
    assert app.retry(h.id) is False
    assert [e["kind"] for e in app.run_errors(h.id)] == ["retried"]


# -- the batch engine: one JSON document per batch ------------------------------------------


def rows_of(app: pgqueue.App, handles: list[pgqueue.RunHandle]) -> list[pgqueue.Run]:
    return [app.get_run(h.id) for h in handles]


def test_enqueue_many_takes_the_options_of_its_batch(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any]
) -> None:
    at = datetime.now(UTC) + timedelta(hours=1)
    later = send.options(run_at=at, priority=-5, group="t-1", max_attempts=1, timeout=3)
    runs = rows_of(app, later.enqueue_many([("a",), {"to": "b"}]))
    assert {
        (r.state, r.priority, r.group_key, r.max_attempts, r.timeout_seconds) for r in runs
    } == {("scheduled", -5, "t-1", 1, 3.0)}
    assert all(abs((r.run_at - at).total_seconds()) < 0.001 for r in runs)
    delayed = rows_of(
        app, send.options(delay=timedelta(seconds=60), queue="q2").enqueue_many([("c",)])
    )
    now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    assert (delayed[0].state, delayed[0].queue) == ("scheduled", "q2")
    assert timedelta(seconds=55) < delayed[0].run_at - now < timedelta(seconds=65)
    plain = rows_of(app, send.enqueue_many([("d",)]))[0]
    assert (plain.state, plain.priority, plain.group_key, plain.max_attempts) == (
        "queued",
        2,
        None,
        5,
    )


def test_enqueue_many_computes_each_runs_group(app: pgqueue.App) -> None:
    @app.task(group=lambda tenant, n=0: f"tenant-{tenant}")
    def per_tenant(tenant: str, n: int = 0) -> None: ...

    @app.task(group=lambda tenant: None)
    def no_group(tenant: str) -> None: ...

    runs = rows_of(app, per_tenant.enqueue_many([("a",), {"tenant": "b", "n": 1}, ("c", 2)]))
    assert [r.group_key for r in runs] == ["tenant-a", "tenant-b", "tenant-c"]
    forced = rows_of(app, per_tenant.options(group="all").enqueue_many([("a",), ("b",)]))
    assert [r.group_key for r in forced] == ["all", "all"]
    assert rows_of(app, no_group.enqueue_many([("a",)]))[0].group_key is None


def test_enqueue_many_across_chunks_keeps_order(
    app: pgqueue.App, send: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgqueue.tasks.RunBatch, "CHUNK", 3)
    items: list[Any] = [
        (f"to{i}",) if i % 2 else {"to": f"to{i}", "subject": "é"} for i in range(8)
    ]
    handles = send.enqueue_many(items)
    runs = rows_of(app, handles)
    assert [r.args or [r.kwargs["to"]] for r in runs] == [[f"to{i}"] for i in range(8)]
    assert [h.id for h in handles] == sorted(h.id for h in handles)
    assert all(h.created for h in handles)


def test_enqueue_many_of_a_thousand_and_more(app: pgqueue.App, send: Any) -> None:
    handles = send.enqueue_many([(str(i),) for i in range(2500)])
    assert len({h.id for h in handles}) == 2500
    first, last = app.get_run(handles[0].id), app.get_run(handles[-1].id)
    assert (first.args, last.args) == (["0"], ["2499"])


def test_enqueue_many_checks_every_run(dsn: str) -> None:
    app = pgqueue.App(dsn, max_payload_bytes=1000)

    @app.task
    def t(blob: str, *, n: int = 0) -> None: ...

    with pytest.raises(pgqueue.InvalidArguments, match=r"task '.*t'.*unexpected keyword"):
        t.enqueue_many([("a",), {"blob": "b", "nope": 1}])
    with pytest.raises(pgqueue.InvalidArguments, match="missing a required argument"):
        t.enqueue_many([("a",), ()])
    with pytest.raises(pgqueue.InvalidArguments, match="too many positional"):
        t.enqueue_many([("a", 1)])
    with pytest.raises(pgqueue.InvalidArguments, match="keywords must be strings"):
        t.enqueue_many([{1: "a"}])
    with pytest.raises(TypeError, match="args tuple/list or a kwargs dict, not str"):
        t.enqueue_many(["abc"])  # type: ignore[list-item]
    with pytest.raises(pgqueue.PayloadTooLarge, match="are 2,004 bytes, over the 1,000-byte limit"):
        t.enqueue_many([("small",), ("x" * 2000,)])
    with pytest.raises(pgqueue.PayloadTooLarge, match="1,000-byte limit"):
        t.enqueue_many([{"blob": "y" * 1000}])
    with pytest.raises(ValueError, match="cannot share one idempotency_key"):
        t.options(idempotency_key="k").enqueue_many([("a",)])
    # many runs under the limit each, over it together: fine
    assert len(t.enqueue_many([("z" * 500,)] * 10)) == 10
    assert len(t.enqueue_many([("a",), {"blob": "b", "n": 2}])) == 2
    app.close()


def test_insert_runs_mixes_keyed_and_unkeyed_rows(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any]
) -> None:
    taken = send.options(idempotency_key="k-old").enqueue("old")

    def row(to: str, key: str | None = None) -> Any:
        return send.make_row((to,), {}, pgqueue.tasks.EnqueueOptions(idempotency_key=key))

    rows = [row("a"), row("b", "k-new"), row("c", "k-old"), row("d", "k-new"), row("e")]
    handles = app.insert_runs(rows)
    assert [h.created for h in handles] == [True, True, False, False, True]
    assert handles[2].id == taken.id and handles[3].id == handles[1].id
    runs = rows_of(app, handles)
    assert [r.args for r in runs] == [["a"], ["b"], ["old"], ["b"], ["e"]]
    assert handles[0].id < handles[1].id < handles[4].id
    count = conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone()
    assert count == (4,)


def test_insert_runs_of_several_tasks_and_options(app: pgqueue.App, send: Any) -> None:
    @app.task(queue="other", priority=7)
    def other(n: int) -> None: ...

    at = datetime.now(UTC) + timedelta(hours=2)
    opts = pgqueue.tasks.EnqueueOptions
    rows = [
        send.make_row(("a",), {"subject": "s"}, opts(group="g", timeout=2.5)),
        other.make_row((1,), {}, opts(run_at=at)),
        other.make_row((2,), {}, opts(delay=30, priority=-1, max_attempts=9)),
    ]
    runs = rows_of(app, app.insert_runs(rows))
    got = [
        (r.task, r.queue, r.state, r.priority, r.max_attempts, r.timeout_seconds, r.group_key)
        for r in runs
    ]
    assert got == [
        (send.name, "emails", "queued", 2, 5, 2.5, "g"),
        (other.name, "other", "scheduled", 7, 3, None, None),
        (other.name, "other", "scheduled", -1, 9, None, None),
    ]
    assert abs((runs[1].run_at - at).total_seconds()) < 0.001
    assert (runs[0].args, runs[0].kwargs, runs[2].args) == (["a"], {"subject": "s"}, [2])


def test_duplicate_keys_in_one_batch_make_one_run(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any]
) -> None:
    rows = [
        send.make_row((to,), {}, pgqueue.tasks.EnqueueOptions(idempotency_key="same"))
        for to in ("first", "second", "third")
    ]
    handles = app.insert_runs(rows)
    assert [h.created for h in handles] == [True, False, False]
    assert len({h.id for h in handles}) == 1
    assert app.get_run(handles[0].id).args == ["first"]
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (1,)


def test_enqueue_many_async_is_the_same_batch(app: pgqueue.App, send: Any) -> None:
    rows = [
        send.make_row((to,), {}, pgqueue.tasks.EnqueueOptions(idempotency_key="ak"))
        for to in ("x", "y")
    ]

    async def main() -> tuple[list[pgqueue.RunHandle], list[pgqueue.RunHandle]]:
        try:
            many = await send.options(priority=-3).enqueue_many_async([("a",), {"to": "b"}])
            keyed = await app.insert_runs_async(rows)
            keyed.append(await send.options(idempotency_key="ak").enqueue_async("z"))
            return many, keyed
        finally:
            await app.aclose()

    many, keyed = asyncio.run(main())
    runs = rows_of(app, many)
    assert [(r.args, r.kwargs, r.priority) for r in runs] == [
        (["a"], {}, -3),
        ([], {"to": "b"}, -3),
    ]
    assert [h.created for h in keyed] == [True, False, False]
    assert len({h.id for h in keyed}) == 1


def test_enqueue_many_rows_for_eager_testing(send: Any) -> None:
    """A batch hands out RunRows (pgqueue.testing.eager runs them) equal to enqueue's."""
    batch = send.options(priority=1).make_rows([("a",), {"to": "b", "subject": "s"}])
    single = send.make_row(("a",), {}, pgqueue.tasks.EnqueueOptions(priority=1))
    assert len(batch) == 2 and batch[0] == single and list(batch) == [single, batch[1]]
    assert (batch[1].args, batch[1].kwargs) == ("[]", '{"to":"b","subject":"s"}')
    assert batch[-1] == batch[1] and batch[:1] == [single]


def test_keyed_batch_statement_is_the_batch_statement_plus_on_conflict() -> None:
    def body(name: str) -> str:
        text = _sql.query(name)
        return "\n".join(line for line in text.splitlines() if not line.startswith("--"))

    conflict = "    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING\n"
    assert conflict in body("enqueue_runs_keyed")
    assert body("enqueue_runs_keyed").replace(conflict, "") == body("enqueue_runs")


def test_arity_check_agrees_with_signature_bind() -> None:
    """Task.validate skips Signature.bind when Arity accepts a call: it must never accept
    a call bind rejects, and should accept the plain calls."""
    import inspect
    import itertools

    from pgqueue.tasks import Arity

    def f1(a: int, b: int = 1) -> None: ...
    def f2(a: int, /, b: int, *, c: int, d: int = 4) -> None: ...
    def f3(*args: int, **kwargs: int) -> None: ...
    def f4(a: int, *args: int, b: int = 2, **kwargs: int) -> None: ...
    def f5() -> None: ...
    def f6(a: int, /, b: int = 2, **kwargs: int) -> None: ...

    arg_sets: list[tuple[Any, ...]] = [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)]
    kwarg_sets: list[dict[Any, Any]] = [
        {},
        {"a": 1},
        {"b": 2},
        {"c": 3},
        {"a": 1, "b": 2},
        {"b": 2, "c": 3},
        {"a": 1, "b": 2, "c": 3, "d": 4},
        {"x": 9},
        {"args": 1},
        {1: 2},
    ]
    for fn in (f1, f2, f3, f4, f5, f6):
        sig = inspect.signature(fn)
        arity = Arity(sig)
        for args, kwargs in itertools.product(arg_sets, kwarg_sets):
            try:
                sig.bind(*args, **kwargs)
                binds = True
            except TypeError:
                binds = False
            if arity.accepts(args, kwargs):
                assert binds, (fn.__name__, args, kwargs)
            elif binds and not kwargs:
                raise AssertionError(f"{fn.__name__}{args}: a plain call goes to bind")
    assert Arity(inspect.signature(f1)).accepts((), {"a": 1, "b": 2})
    assert Arity(inspect.signature(f2)).accepts((1,), {"b": 2, "c": 3})


def test_enqueue_many_runs_eagerly_under_testing_eager(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any]
) -> None:
    from pgqueue.testing import eager

    with eager(app) as runs:
        handles = send.options(priority=-1).enqueue_many([("a",), {"to": "b", "subject": "s"}])
    assert [(r.args, r.kwargs, r.result, r.priority) for r in runs] == [
        (["a"], {}, "a", -1),
        ([], {"to": "b", "subject": "s"}, "b", -1),
    ]
    assert [h.id for h in handles] == [r.id for r in runs]
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (0,)


def test_plain_batches_insert_what_the_general_statement_does(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """enqueue_runs_plain.sql (an enqueue_many batch of [args, kwargs] only) writes the
    same rows and returns the same result row as enqueue_runs.sql given the same batch."""
    from pgqueue import _inserts, _sql
    from pgqueue.tasks import EnqueueOptions, RunBatch

    app.set_limits("lim", concurrency=2, group_concurrency=None)

    @app.task(queue="lim", priority=3, max_attempts=5, timeout=7, group="g")
    def shaped(a: int, b: int = 0) -> None: ...

    @app.task
    def bare(a: int) -> None: ...

    columns = (
        "task, queue, state, priority, args, kwargs, max_attempts, timeout_seconds, group_key,"
        " idempotency_key, parent_id, limited, attempt, notify_done,"
        " round(extract(epoch FROM run_at - created_at)) AS due_in"
    )
    cases = [
        (shaped, EnqueueOptions(), [(1,), (2, 3), {"a": 4}]),
        (shaped, EnqueueOptions(delay=60, priority=-1), [(5,)]),
        (bare, EnqueueOptions(parent_id=None), [(6,), (7,)]),
    ]
    for task, opts, items in cases:
        batch = RunBatch.build(task, opts, items)
        assert batch.plain
        query, params = _inserts._statement(batch, keyed=False)
        assert query == _sql.query("enqueue_runs_plain")
        params["notify"] = True
        results, rows = [], []
        for name in ("enqueue_runs_plain", "enqueue_runs"):
            found = conn.execute(_sql.query(name), params).fetchone()
            assert found is not None
            results.append((len(found[0]), found[1], found[2]))
            rows.append(
                conn.execute(
                    f"SELECT {columns} FROM pgqueue.runs WHERE id = ANY(%s) ORDER BY id",
                    (found[0],),
                ).fetchall()
            )
        assert results[0] == results[1]
        assert rows[0] == rows[1] and len(rows[0]) == len(items)
    group_by_args = RunBatch.build(
        app.task(name="grouped", group=lambda a: str(a))(lambda a: None), EnqueueOptions(), [(1,)]
    )
    assert not group_by_args.plain  # its elements carry a group: the general statement
