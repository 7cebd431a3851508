"""Enqueue: options, bulk, idempotency, transactions, validation, bad input."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import sql as _sql
from tests.helpers import empty_database


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
    then alternated between two backends for good, about 70 us slower per call
    (bench/RESULTS.md). Watched over `window` seconds of back-to-back requests."""
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
    with empty_database(server_params, "pgqueue_unmigrated") as dsn:
        app = pgqueue.App(dsn)

        @app.task
        def t() -> None: ...

        with pytest.raises(pgqueue.NotMigrated, match="pgqueue migrate"):
            t.enqueue()
        with pytest.raises(pgqueue.NotMigrated, match="pgqueue migrate"):
            app.check_schema()
        app.close()


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
    monkeypatch.setattr(pgqueue.enqueue.options.RunBatch, "CHUNK", 3)
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
        return send.make_row((to,), {}, pgqueue.enqueue.options.EnqueueOptions(idempotency_key=key))

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
    opts = pgqueue.enqueue.options.EnqueueOptions
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
        send.make_row((to,), {}, pgqueue.enqueue.options.EnqueueOptions(idempotency_key="same"))
        for to in ("first", "second", "third")
    ]
    handles = app.insert_runs(rows)
    assert [h.created for h in handles] == [True, False, False]
    assert len({h.id for h in handles}) == 1
    assert app.get_run(handles[0].id).args == ["first"]
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (1,)


def test_enqueue_many_async_is_the_same_batch(app: pgqueue.App, send: Any) -> None:
    rows = [
        send.make_row((to,), {}, pgqueue.enqueue.options.EnqueueOptions(idempotency_key="ak"))
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
    single = send.make_row(("a",), {}, pgqueue.enqueue.options.EnqueueOptions(priority=1))
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

    from pgqueue.tasks.task import Arity

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
    """enqueue_runs_plain.sql (an enqueue_many batch: what its runs share encoded once,
    [args, kwargs(, group)] per run) writes the same rows and returns the same result row
    as enqueue_runs.sql given the batch's runs each encoded whole."""
    from pgqueue.db import sql as _sql
    from pgqueue.enqueue import encoding
    from pgqueue.enqueue import inserts as _inserts
    from pgqueue.tasks.task import EnqueueOptions, RunBatch

    app.set_limits("lim", concurrency=2, group_concurrency=None)

    @app.task(queue="lim", priority=3, max_attempts=5, timeout=7, group="g")
    def shaped(a: int, b: int = 0) -> None: ...

    @app.task
    def bare(a: int) -> None: ...

    grouped = app.task(name="grouped", group=lambda a: str(a))(lambda a: None)
    columns = (
        "task, queue, state, priority, args, kwargs, max_attempts, timeout_seconds, group_key,"
        " idempotency_key, parent_id, limited, attempt, notify_done,"
        " round(extract(epoch FROM run_at - created_at)) AS due_in"
    )
    cases = [
        (shaped, EnqueueOptions(), [(1,), (2, 3), {"a": 4}]),
        (shaped, EnqueueOptions(delay=60, priority=-1), [(5,)]),
        (bare, EnqueueOptions(parent_id=None), [(6,), (7,)]),
        (grouped, EnqueueOptions(), [(8,), (9,)]),
        (grouped, EnqueueOptions(group="fixed", queue="lim"), [(10,)]),
    ]
    for task, opts, items in cases:
        batch = RunBatch.build(task, opts, items)
        query, params = _inserts._statement(batch, unique=False, keyed=False, bare=False)
        assert query == _sql.query("enqueue_runs_plain")
        common = {"notify": True, "headers": None, "batch_id": None}
        whole = {"runs": encoding.document(list(batch)), **common}
        results, rows = [], []
        for name, given in (("enqueue_runs_plain", params | common), ("enqueue_runs", whole)):
            found = conn.execute(_sql.query(name), given).fetchone()
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
    assert not RunBatch.build(grouped, EnqueueOptions(), [(1,)]).plain  # a group per run


def test_a_plain_single_run_inserts_what_the_general_statement_does(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """enqueue_run_plain.sql (one run due now, without key, group, parent, headers or
    batch) writes the same row, flagged the same way, and answers the same (id, key) as
    enqueue_run.sql; every other single run takes the general statement."""
    from pgqueue.enqueue import encoding
    from pgqueue.enqueue import inserts as _inserts
    from pgqueue.tasks.task import EnqueueOptions

    app.set_limits("lim", concurrency=2, group_concurrency=None)

    @app.task(queue="lim", priority=3, max_attempts=5, timeout=7)
    def limited(a: int, b: int = 0) -> None: ...

    @app.task
    def bare(a: int) -> None: ...

    columns = (
        "task, queue, state, priority, args, kwargs, max_attempts, timeout_seconds, group_key,"
        " idempotency_key, parent_id, limited, attempt, notify_done, headers, batch_id,"
        " run_at = created_at AS due_now"
    )
    for task, args, kwargs in ((limited, (1,), {"b": 2}), (bare, ("x",), {})):
        row = task.make_row(args, kwargs, EnqueueOptions())
        op = _inserts.Insert(app.database, [row])
        assert op.query == _sql.query("enqueue_run_plain")
        general = {
            "run": encoding.encode(row),
            "headers": None,
            "batch_id": None,
            "notify": True,
        }
        stored = []
        for query, params in ((op.query, op.params), (_sql.query("enqueue_run"), general)):
            found = op.found(conn.execute(query, params).fetchone())
            assert found is not None and found[1] == [None]
            stored.append(
                conn.execute(
                    f"SELECT {columns} FROM pgqueue.runs WHERE id = %s", (found[0][0],)
                ).fetchone()
            )
        assert stored[0] == stored[1]
        assert stored[0] is not None and stored[0][11] == (task is limited)
    general_cases = [
        EnqueueOptions(delay=0),
        EnqueueOptions(run_at=datetime.now(UTC)),
        EnqueueOptions(group="g"),
        EnqueueOptions(idempotency_key="k"),
        EnqueueOptions(parent_id=1),
    ]
    for opts in general_cases:
        op = _inserts.Insert(app.database, [bare.make_row((1,), {}, opts)])
        assert op.query == _sql.query("enqueue_run"), opts
    row = bare.make_row((1,), {}, EnqueueOptions())
    assert _inserts.Insert(app.database, [row], headers="{}").query == _sql.query("enqueue_run")
    assert _inserts.Insert(app.database, [row], batch_id=1).query == _sql.query("enqueue_run")


# -- hostile input: refused before anything is stored (docs/security.md) -------------------------


def nested(depth: int) -> Any:
    """A value whose lists nest `depth` deep ([] is 1)."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def count_runs(conn: psycopg.Connection[Any]) -> int:
    return conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone()[0]  # type: ignore[index]


@pytest.mark.parametrize("depth", [257, 965, 5000])
def test_arguments_nested_deeper_than_max_json_depth_are_refused(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any], depth: int
) -> None:
    # the args list is a level of its own: its one argument may nest 255 deep
    send.enqueue(nested(255))
    match = r"^arguments of task .*: nested deeper than 256 levels"
    with pytest.raises(pgqueue.InvalidArguments, match=match):
        send.enqueue(nested(depth))
    with pytest.raises(pgqueue.InvalidArguments, match=match):
        send.enqueue("a", subject=nested(depth))
    with pytest.raises(pgqueue.InvalidArguments, match=match):
        send.enqueue_many([("a",)] * 10 + [(nested(depth),)])
    with pytest.raises(pgqueue.InvalidArguments, match=r"payload of event 'e': nested deeper"):
        app.emit_event("e", payload=nested(depth))
    assert count_runs(conn) == 1
    assert conn.execute("SELECT count(*) FROM pgqueue.events").fetchone() == (0,)


def test_max_json_depth_is_an_app_option(dsn: str, conn: psycopg.Connection[Any]) -> None:
    app = pgqueue.App(dsn, max_json_depth=3)

    @app.task
    def t(x: Any) -> None: ...

    t.enqueue([[1]])  # [[[1]]]: 3 levels
    t.enqueue_many([([[1]],), {"x": [[1]]}])
    with pytest.raises(pgqueue.InvalidArguments, match="deeper than 3 levels"):
        t.enqueue([[[1]]])
    with pytest.raises(pgqueue.InvalidArguments, match="deeper than 3 levels"):
        t.enqueue_many([([[1]],), ([[[1]]],)])
    # brackets inside strings are text
    t.enqueue("[[[[[[[[" * 10 + '"\\' + "{{{{" * 10)
    assert count_runs(conn) == 4
    app.close()


@pytest.mark.parametrize(
    "enqueue",
    [
        lambda t, app: t.enqueue("\ud800"),
        lambda t, app: t.enqueue("a", subject={"\udfff": 1}),
        lambda t, app: t.enqueue_many([("a",), ("b\ud800",)]),
        lambda t, app: t.options(group="g\ud800").enqueue("a"),
        lambda t, app: t.options(queue="q\ud800").enqueue("a"),
        lambda t, app: t.options(idempotency_key="k\ud800").enqueue("a"),
        lambda t, app: app.enqueue_by_name("t\ud800"),
        lambda t, app: app.emit_event("e", key="\ud800"),
        lambda t, app: app.emit_event("e", payload="\ud800"),
    ],
)
def test_lone_surrogates_are_invalid_arguments(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any], enqueue: Any
) -> None:
    with pytest.raises(pgqueue.InvalidArguments, match="lone surrogate"):
        enqueue(send, app)
    assert count_runs(conn) == 0


@pytest.mark.parametrize(
    "enqueue",
    [
        lambda t, app: app.enqueue_by_name("t\x00"),
        lambda t, app: t.options(queue="q\x00").enqueue("a"),
        lambda t, app: t.options(group="g\x00").enqueue("a"),
        lambda t, app: t.options(idempotency_key="k\x00").enqueue("a"),
        lambda t, app: app.emit_event("e\x00"),
        lambda t, app: app.emit_event("e", key="k\x00"),
    ],
)
def test_nul_in_names_and_keys_is_invalid_arguments(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any], enqueue: Any
) -> None:
    with pytest.raises(pgqueue.InvalidArguments, match="NUL character"):
        enqueue(send, app)
    assert count_runs(conn) == 0


@pytest.mark.parametrize("key", ["k" * 513, "é" * 257, "x" * 3000])
def test_keys_over_512_bytes_are_refused(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any], key: str
) -> None:
    @app.task(name="grouped", group=lambda n: key if n else "short")
    def grouped(n: int) -> None: ...

    send.options(group="k" * 512, idempotency_key="é" * 256).enqueue("a")
    app.emit_event("e", key="k" * 512)
    match = r"key is [\d,]+ bytes in UTF-8, over the 512-byte limit"
    for call in (
        lambda: send.options(group=key).enqueue("a"),
        lambda: send.options(idempotency_key=key).enqueue("a"),
        lambda: grouped.enqueue(1),
        lambda: grouped.enqueue_many([(0,), (1,)]),
        lambda: app.emit_event("e", key=key),
    ):
        with pytest.raises(pgqueue.InvalidArguments, match=match):
            call()
    with pytest.raises(pgqueue.InvalidArguments, match="group key"):
        app.task(name="fixed", group=key)(lambda: None)
    assert count_runs(conn) == 1
    assert conn.execute("SELECT count(*) FROM pgqueue.events").fetchone() == (1,)


def test_values_at_their_limits_pass_and_names_past_them_are_out_of_range(
    app: pgqueue.App, send: Any
) -> None:
    h = send.options(priority=-32768, max_attempts=2**31 - 1, timeout=1e-3, delay=0).enqueue("a")
    run = app.get_run(h.id)
    assert (run.priority, run.max_attempts, run.timeout_seconds) == (-32768, 2**31 - 1, 1e-3)
    h = send.options(priority=32767, max_attempts=1, queue="q" * 200).enqueue("a")
    assert (app.get_run(h.id).priority, app.get_run(h.id).queue) == (32767, "q" * 200)
    with pytest.raises(pgqueue.OutOfRange, match="queue name must be 1 to 200 characters"):
        send.options(queue="q" * 201).enqueue("a")
    with pytest.raises(pgqueue.OutOfRange, match="task name must be 1 to 200"):
        app.enqueue_by_name("t" * 201)
    with pytest.raises(pgqueue.OutOfRange, match="event name must be 1 to 200"):
        app.emit_event("e" * 201)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"priority": 40000}, "priority must be between -32768 and 32767"),
        ({"priority": -32769}, "priority must be between"),
        ({"max_attempts": 10_000_000_000}, "max_attempts must be between 1 and 2147483647"),
        ({"max_attempts": 0}, "max_attempts must be between 1"),
        ({"max_attempts": -1}, "max_attempts must be between 1"),
        ({"timeout": 0}, "timeout must be more than 0 seconds"),
        ({"timeout": -1}, "timeout must be more than 0"),
        ({"timeout": float("nan")}, "timeout must be .*, not nan"),
        ({"timeout": float("inf")}, "timeout must be .*, not inf"),
        ({"delay": -1}, "delay must be 0 or more seconds"),
        ({"delay": timedelta(seconds=-5)}, "delay must be 0 or more"),
        ({"delay": float("nan")}, "delay must be .*, not nan"),
        ({"delay": float("inf")}, "delay must be .*, not inf"),
        ({"delay": 1e308}, r"delay must be .*, not 1e\+308"),
        ({"delay": 10**400}, "delay must be .*, not inf"),
    ],
)
def test_out_of_range_options_raise_out_of_range(
    app: pgqueue.App, send: Any, conn: psycopg.Connection[Any], options: Any, match: str
) -> None:
    with pytest.raises(pgqueue.OutOfRange, match=match):
        send.options(**options).enqueue("a")
    with pytest.raises(pgqueue.OutOfRange, match=match):
        app.enqueue_by_name("elsewhere", ["a"], **options)
    with pytest.raises(pgqueue.OutOfRange, match=match):
        send.options(**options).enqueue_many([("a",)])
    assert isinstance(pgqueue.OutOfRange("x"), (ValueError, pgqueue.UserError))
    assert count_runs(conn) == 0


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"priority": 40000}, "priority must be between"),
        ({"max_attempts": 0}, "max_attempts must be between 1"),
        ({"max_attempts": 2**31}, "max_attempts must be between 1"),
        ({"timeout": 0}, "timeout must be more than 0"),
        ({"timeout": float("nan")}, "timeout must be .*, not nan"),
        ({"queue": "q" * 201}, "queue name must be 1 to 200"),
        ({"name": "t" * 201}, "task name must be 1 to 200"),
    ],
)
def test_out_of_range_task_options_are_refused_at_decoration(
    app: pgqueue.App, options: Any, match: str
) -> None:
    with pytest.raises(pgqueue.OutOfRange, match=match):
        app.task(**options)(lambda: None)
    with pytest.raises(pgqueue.OutOfRange, match=match):
        app.workflow(**options)(lambda ctx: None)


def test_ids_beyond_bigint_are_not_found(app: pgqueue.App) -> None:
    for run_id in (2**63, -(2**63) - 1, 10**30):
        with pytest.raises(pgqueue.RunNotFound, match=f"no run with id {run_id}"):
            app.cancel(run_id)
        with pytest.raises(pgqueue.RunNotFound, match="no run with id"):
            app.retry(run_id)
        with pytest.raises(pgqueue.RunNotFound, match="no run with id"):
            app.get_run(run_id)
        with pytest.raises(pgqueue.RunNotFound, match="no run with id"):
            asyncio.run(app.get_run_async(run_id))
    assert app.cancel(2**63 - 1) is False  # the largest id: a plain miss


def test_a_refused_enqueue_leaves_the_callers_transaction_usable(
    app: pgqueue.App, send: Any, dsn: str
) -> None:
    with psycopg.connect(dsn) as own:
        with own.transaction():
            first = send.options(conn=own).enqueue("a")
            for bad in (
                {"group": "g" * 600},
                {"priority": 40000},
                {"delay": float("nan")},
                {"queue": "q\x00"},
            ):
                with pytest.raises(pgqueue.UserError):
                    send.options(conn=own, **bad).enqueue("a")
            with pytest.raises(pgqueue.InvalidArguments):
                send.options(conn=own).enqueue(nested(300))
            second = send.options(conn=own).enqueue("b")
        assert {app.get_run(first.id).args[0], app.get_run(second.id).args[0]} == {"a", "b"}


def test_sql_enqueue_refuses_deep_json_long_keys_and_bad_values(
    conn: psycopg.Connection[Any],
) -> None:
    deep = "[" * 257 + "]" * 257
    ok = "[" * 256 + "]" * 256
    assert conn.execute(
        "SELECT pgqueue.enqueue('t', %s::jsonb, group_key => repeat('g', 512),"
        " idempotency_key => repeat('é', 256))",
        [ok],
    ).fetchone()
    assert conn.execute("SELECT pgqueue.emit_event('e', repeat('k', 512), %s::jsonb)", [ok])
    refused = [
        ("SELECT pgqueue.enqueue('t', %s::jsonb)", [deep], "args: nested deeper than 256"),
        (
            "SELECT pgqueue.enqueue('t', '[]', %s::jsonb)",
            ['{"a":' * 300 + "1" + "}" * 300],
            "kwargs: nested deeper than 256",
        ),
        (
            "SELECT pgqueue.enqueue('t', group_key => repeat('g', 513))",
            [],
            "group_key is 513 bytes, over the 512-byte limit",
        ),
        (
            "SELECT pgqueue.enqueue('t', group_key => repeat(md5('x'), 100))",
            [],
            "group_key is 3200 bytes",
        ),
        (
            "SELECT pgqueue.enqueue('t', idempotency_key => repeat('é', 257))",
            [],
            "idempotency_key is 514 bytes",
        ),
        ("SELECT pgqueue.emit_event('e', repeat('k', 513))", [], "event key is 513 bytes"),
        (
            "SELECT pgqueue.emit_event('e', payload => %s::jsonb)",
            [deep],
            "the payload: nested deeper than 256",
        ),
        ("SELECT pgqueue.enqueue('t', priority => 40000)", [], "priority must be between"),
        ("SELECT pgqueue.enqueue('t', max_attempts => 0)", [], "max_attempts must be 1 or more"),
        ("SELECT pgqueue.enqueue('t', timeout_seconds => 'NaN')", [], "timeout_seconds must be"),
        ("SELECT pgqueue.enqueue(repeat('t', 201))", [], "names must be 1 to 200"),
        ("SELECT pgqueue.emit_event('e', delay => -1)", [], "delay must be 0 or more"),
    ]
    for query, params, message in refused:
        with pytest.raises(
            (psycopg.errors.InvalidParameterValue, psycopg.errors.NumericValueOutOfRange),
            match=message,
        ):
            conn.execute(query, params)
        conn.rollback()
    assert count_runs(conn) == 1
    # and no client at all stores a group key too long for the limited claim's index
    with pytest.raises(psycopg.errors.CheckViolation, match="runs_group_key_length"):
        conn.execute(
            "INSERT INTO pgqueue.runs (task, queue, state, group_key)"
            " VALUES ('t', 'q', 'queued', repeat('g', 513))"
        )
