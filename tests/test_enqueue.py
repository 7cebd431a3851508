"""Enqueue: options, bulk, idempotency, transactions, validation, bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import pgqueue


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
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (0,)


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
