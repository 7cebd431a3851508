"""Hostile times, sizes, bools and keys (docs/security.md, Input limits): due times outside
1970-01-01 .. 9999-12-31 00:00 UTC are refused at every entry and by the tables; a row
stored before that cannot stop the stager or the inspection commands; payloads over 1 MiB
are refused from SQL as from Python; a bool is not a number; keys are compared in NFC."""

from __future__ import annotations

import contextlib
import math
import unicodedata
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from alembic import command

import pgqueue
from pgqueue.db import migrate
from pgqueue.tasks.retry import RetryPolicy
from tests.cli.helpers import cli
from tests.helpers import WorkerProcess, scalar, wait_until
from tests.sql.test_migrations import database_at

APP = "tests.apps.basic:app"
MIB = 1024 * 1024
OUT_OF_RANGE = [
    "-infinity",
    "infinity",
    "10000-01-01 00:00:00+00",
    "0044-03-15 00:00:00+00 BC",
    "1969-12-31 23:59:59+00",
    "9999-12-31 00:00:01+00",
]
BOUNDS = ["1970-01-01 00:00:00+00", "9999-12-31 00:00:00+00"]
COMPOSED = unicodedata.normalize("NFC", "café-\u1e9b\u0323")
DECOMPOSED = unicodedata.normalize("NFD", COMPOSED)


# --- due times ------------------------------------------------------------------------------


def test_python_refuses_a_run_at_outside_the_bounds_with_one_line(app: pgqueue.App) -> None:
    @app.task
    def t() -> None: ...

    late = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)  # year 10000 east of UTC
    early = datetime(1969, 12, 31, 23, 59, tzinfo=UTC)
    far_east = datetime(9999, 12, 31, 20, tzinfo=timezone(timedelta(hours=-5)))
    for when in (late, early, far_east, datetime(2030, 1, 1)):
        with pytest.raises(pgqueue.OutOfRange) as exc:
            t.options(run_at=when).enqueue()
        assert "run_at must be" in str(exc.value) and "\n" not in str(exc.value)
        with pytest.raises(pgqueue.OutOfRange):
            t.options(run_at=when).enqueue_many([(), ()])
    with pytest.raises(pgqueue.InvalidArguments, match="run_at must be a datetime"):
        t.options(run_at="2030-01-01").enqueue()  # type: ignore[arg-type]
    assert scalar(app.dsn, "SELECT count(*) FROM pgqueue.runs") == 0


def test_the_latest_due_time_reads_back_in_every_server_time_zone(app: pgqueue.App) -> None:
    @app.task
    def t() -> None: ...

    latest = datetime(9999, 12, 31, tzinfo=UTC)
    run = t.options(run_at=latest).enqueue()
    for zone in ("Pacific/Kiritimati", "Etc/GMT-14", "America/Adak", "UTC"):
        with psycopg.connect(app.dsn, options=f"-c TimeZone={zone}") as c:
            row = c.execute("SELECT run_at FROM pgqueue.runs WHERE id = %s", (run.id,)).fetchone()
        assert row is not None and row[0] == latest, zone
    assert app.get_run(run.id).run_at == latest


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_sql_enqueue_refuses_a_run_at_outside_the_bounds(
    conn: psycopg.Connection[Any], value: str
) -> None:
    with pytest.raises(psycopg.errors.DatetimeFieldOverflow) as exc:
        conn.execute("SELECT pgqueue.enqueue('t', run_at => %s::timestamptz)", (value,))
    assert "run_at must be from 1970-01-01 to 9999-12-31 00:00 UTC" in str(exc.value)
    document = f'[{{"task": "t", "queue": "q", "priority": 0, "max_attempts": 1, "args": [], "kwargs": {{}}, "unique_key": "k", "unique_while": "queued", "run_at": "{value}"}}]'  # noqa: E501
    with pytest.raises(psycopg.errors.DatetimeFieldOverflow):
        conn.execute(
            "SELECT * FROM pgqueue.enqueue_unique(%s::jsonb, NULL, NULL, false)", (document,)
        )
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (0,)


def test_sql_enqueue_takes_the_bounds_themselves(conn: psycopg.Connection[Any]) -> None:
    for value in BOUNDS:
        conn.execute("SELECT pgqueue.enqueue('t', run_at => %s::timestamptz)", (value,))
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (2,)


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_the_tables_refuse_a_due_time_outside_the_bounds(
    conn: psycopg.Connection[Any], value: str
) -> None:
    """Whatever path writes them (a statement of an older release, a hand-written INSERT)."""
    with pytest.raises(psycopg.errors.CheckViolation, match="runs_run_at_range"):
        conn.execute("INSERT INTO pgqueue.runs (task, run_at) VALUES ('t', %s)", (value,))
    conn.execute("INSERT INTO pgqueue.runs (task) VALUES ('t')")
    with pytest.raises(psycopg.errors.CheckViolation, match="runs_run_at_range"):
        conn.execute("UPDATE pgqueue.runs SET run_at = %s", (value,))
    with pytest.raises(psycopg.errors.CheckViolation, match="events_deliver_at_range"):
        conn.execute("INSERT INTO pgqueue.events (event, deliver_at) VALUES ('e', %s)", (value,))


def test_sleeps_retries_and_backoffs_past_the_bounds_are_refused_where_they_are_made() -> None:
    with pytest.raises(ValueError, match="RetryAfter seconds must be 0 to"):
        pgqueue.RetryAfter(1e300)
    with pytest.raises(ValueError, match="RetryAfter seconds must be 0 to"):
        pgqueue.RetryAfter(math.nan)
    assert pgqueue.RetryAfter(math.inf).seconds == math.inf  # no due time: documented
    for bad in ({"max_delay": 1e300}, {"base": math.nan}, {"factor": math.inf}):
        with pytest.raises(ValueError, match="RetryPolicy needs"):
            RetryPolicy(**bad)
    # a late attempt of a steep policy is capped, not an OverflowError in the worker
    assert RetryPolicy(factor=10, jitter=0).delay(100_000) == 3600.0


def test_ctx_sleep_until_refuses_a_time_outside_the_bounds() -> None:
    from pgqueue.workflows.context import Context

    ctx = Context.__new__(Context)  # the check comes before any use of the run
    for when in (datetime(10000 - 1, 12, 31, 23, tzinfo=UTC), datetime(1900, 1, 1, tzinfo=UTC)):
        with pytest.raises(pgqueue.OutOfRange, match="sleep_until must be from 1970-01-01"):
            ctx.sleep_until("nap", when)


# --- a bad time stored before the constraint --------------------------------------------------


def _store_bad_times(dsn: str) -> dict[str, int]:
    """Runs with due times no path can store any more: inserted with the constraint off,
    as an older release's pgqueue.enqueue() did. The constraint then comes back NOT VALID
    (as if added without the repair): staging the due one breaks it, at every pass."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("ALTER TABLE pgqueue.runs DROP CONSTRAINT IF EXISTS runs_run_at_range")
        ids = {}
        for name, state, value in (
            ("scheduled_infinity", "scheduled", "infinity"),
            ("scheduled_10k", "scheduled", "20000-01-01 00:00:00+00"),
            ("scheduled_minus_infinity", "scheduled", "-infinity"),
            ("waiting_infinity", "waiting", "infinity"),
            ("finished_bc", "succeeded", "0100-01-01 00:00:00+00 BC"),
        ):
            row = c.execute(
                "INSERT INTO pgqueue.runs (task, queue, state, run_at) "
                "VALUES ('noop', 'a_bad', %s, %s) RETURNING id",
                (state, value),
            ).fetchone()
            assert row is not None
            ids[name] = row[0]
        c.execute(
            "ALTER TABLE pgqueue.runs ADD CONSTRAINT runs_run_at_range CHECK (run_at BETWEEN "
            "'1970-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00') NOT VALID"
        )
    return ids


def test_a_bad_time_in_one_queue_does_not_stop_the_stager_for_the_others(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stager's pass covers queue a_bad before b_good: a due time it could not read,
    or a statement failing on a_bad's rows, used to abort the whole pass, so b_good's
    delayed run never came due."""
    bad = _store_bad_times(dsn)
    app = pgqueue.App(dsn)
    with contextlib.closing(app):
        delayed = app.enqueue_by_name("noop", queue="b_good", delay=0.5)
        with WorkerProcess(dsn, APP, "--queues", "a_bad,b_good").wait_ready() as worker:
            wait_until(lambda: delayed.get().state == "succeeded", timeout=15)
            # and the next delayed one too: later passes still cover b_good
            again = app.enqueue_by_name("noop", queue="b_good", delay=0.3)
            wait_until(lambda: again.get().state == "succeeded", timeout=15)
            assert worker.proc.stdout is not None
            log = worker.proc.stdout.read()
        assert "stager: stage_due failed for queue 'a_bad'" in log
        assert "runs_run_at_range" in log
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE queue = 'a_bad'") == 5

    for args in (
        ("runs", "list"),
        ("runs", "list", "--queue", "a_bad"),
        *(("runs", "show", str(run_id)) for run_id in bad.values()),
        ("queues",),
        ("stats",),
    ):
        code, out, err = cli(capsys, *args, "--dsn", dsn)
        assert code == 0 and not err, (args, err)
        assert out.strip(), args


def test_queues_and_stats_read_a_queued_run_stored_at_minus_infinity(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before PostgreSQL 16, now() - '-infinity' fails: pgqueue.queue_stats clamps first."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("ALTER TABLE pgqueue.runs DROP CONSTRAINT runs_run_at_range")
        c.execute(
            "INSERT INTO pgqueue.runs (task, queue, run_at) VALUES ('t', 'q', '-infinity'), "
            "('t', 'q', 'infinity')"
        )
    for args in (("queues",), ("stats",)):
        code, out, err = cli(capsys, *args, "--dsn", dsn)
        assert code == 0 and not err, (args, err)
        assert "\nq " in out, out
    app = pgqueue.App(dsn)
    with contextlib.closing(app):
        summary = {q["queue"]: q for q in app.queue_summary()}
    assert summary["q"]["queued"] == 2
    assert summary["q"]["oldest_queued_seconds"] > 50 * 365 * 86400  # since 1970


def test_migration_0022_moves_bad_times_to_the_bounds_and_normalises_keys(
    server_params: dict[str, Any],
) -> None:
    with database_at(server_params, "0021") as dsn:
        with psycopg.connect(dsn, autocommit=True) as c:
            rows = {}
            for name, state, value in (
                ("minus_inf", "queued", "-infinity"),
                ("inf", "scheduled", "infinity"),
                ("ten_k", "scheduled", "10000-01-01 00:00:00+00"),
                ("bc", "failed", "0100-01-01 00:00:00+00 BC"),
                ("fine", "scheduled", "2030-01-01 00:00:00+00"),
            ):
                row = c.execute(
                    "INSERT INTO pgqueue.runs (task, state, run_at, error) "
                    "VALUES ('t', %s, %s, %s) RETURNING id",
                    (state, value, "boom" if state == "failed" else None),
                ).fetchone()
                assert row is not None
                rows[name] = row[0]
            keyed = c.execute(
                "INSERT INTO pgqueue.runs (task, idempotency_key, unique_key, unique_while) "
                "VALUES ('t', %s, %s, 'queued') RETURNING id",
                (DECOMPOSED, "u-" + DECOMPOSED),
            ).fetchone()
            # a key whose NFC form another run already holds stays as it is
            c.execute(
                "INSERT INTO pgqueue.runs (task, idempotency_key) VALUES ('t', %s), ('t', %s)",
                ("x-" + COMPOSED, "x-" + DECOMPOSED),
            )
            # unique keys: only a run in scope can hold one; out of scope, any run takes NFC
            c.execute(
                "INSERT INTO pgqueue.runs (task, state, unique_key, unique_while, finished_at)"
                " VALUES ('t', 'queued', %(nfc)s, 'queued', NULL),"
                " ('t', 'queued', %(nfd)s, 'active', NULL),"
                " ('t', 'succeeded', %(nfd)s, 'queued', now())",
                {"nfc": "v-" + COMPOSED, "nfd": "v-" + DECOMPOSED},
            )
            c.execute(
                "INSERT INTO pgqueue.events (event, key, deliver_at) VALUES ('e', %s, 'infinity')",
                (DECOMPOSED,),
            )
        with migrate._config(dsn) as cfg:
            command.upgrade(cfg, "0022")
        with psycopg.connect(dsn, autocommit=True) as c:
            got = dict(
                c.execute(
                    "SELECT id, (run_at::text, coalesce(error, '')) FROM pgqueue.runs"
                ).fetchall()
            )
            events = c.execute("SELECT key, deliver_at::text FROM pgqueue.events").fetchall()
            held = sorted(
                r[0]
                for r in c.execute(
                    "SELECT idempotency_key FROM pgqueue.runs WHERE idempotency_key LIKE 'x-%%'"
                )
            )
            scoped = c.execute(
                "SELECT state, unique_while, unique_key FROM pgqueue.runs"
                " WHERE unique_key LIKE 'v-%%' ORDER BY id"
            ).fetchall()
        low, high = "1970-01-01 00:00:00+00", "9999-12-31 00:00:00+00"
        for name, bound in (("minus_inf", low), ("inf", high), ("ten_k", high), ("bc", low)):
            run_at, error = got[rows[name]]
            assert run_at == bound, name
            assert "out of range" in error and "migration 0022" in error, error
        assert got[rows["bc"]][1].startswith("boom\n")  # the run's own error is kept
        assert got[rows["fine"]] == ("2030-01-01 00:00:00+00", "")
        assert events == [(COMPOSED, high)]
        assert held == sorted(["x-" + COMPOSED, "x-" + DECOMPOSED])
        assert scoped == [
            ("queued", "queued", "v-" + COMPOSED),
            ("queued", "active", "v-" + DECOMPOSED),  # the NFC key is held in scope
            ("succeeded", "queued", "v-" + COMPOSED),  # out of scope: no conflict
        ]
        # a key stored before the upgrade matches the same key enqueued after it (by this
        # release's code, which needs the schema of this release: the rest of the way)
        with migrate._config(dsn) as cfg:
            command.upgrade(cfg, "head")
        app = pgqueue.App(dsn)
        with contextlib.closing(app):
            again = app.enqueue_by_name("t", idempotency_key=COMPOSED)
            assert keyed is not None and again.id == keyed[0] and not again.created
            with psycopg.connect(dsn, autocommit=True) as c:
                row = c.execute(
                    "SELECT pgqueue.enqueue('t', idempotency_key => %s)", (DECOMPOSED,)
                ).fetchone()
            assert row == (keyed[0],)
            unique = app.enqueue_by_name("t", unique_key="u-" + COMPOSED)
            assert unique.id == keyed[0] and not unique.created


# --- payload sizes ----------------------------------------------------------------------------


def test_sql_enqueue_and_emit_event_refuse_payloads_over_1_mib(
    conn: psycopg.Connection[Any],
) -> None:
    """Measured on jsonb's text: ["xxx..."] is the string plus 4 bytes."""
    over, under = '["' + "x" * (MIB - 3) + '"]', '["' + "x" * (MIB - 100) + '"]'
    for statement in (
        "SELECT pgqueue.enqueue('t', args => %s::jsonb)",
        "SELECT pgqueue.enqueue('t', kwargs => jsonb_build_object('k', %s::jsonb))",
        "SELECT pgqueue.emit_event('e', payload => %s::jsonb)",
    ):
        with pytest.raises(psycopg.errors.InvalidParameterValue) as exc:
            conn.execute(statement, (over,))
        assert "over the 1048576-byte limit" in str(exc.value)
        conn.execute(statement, (under,))
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (2,)
    assert conn.execute("SELECT count(*) FROM pgqueue.events").fetchone() == (1,)


def test_python_refuses_the_same_payloads_over_1_mib(app: pgqueue.App) -> None:
    @app.task
    def t(*args: Any, **kwargs: Any) -> None: ...

    big, small = "x" * (MIB - 3), "x" * (MIB - 100)
    for call in (
        lambda s: t.enqueue(s),
        lambda s: t.enqueue(k=s),
        lambda s: app.emit_event("e", payload=[s]),
    ):
        with pytest.raises(pgqueue.PayloadTooLarge):
            call(big)
        call(small)


# --- bools are not numbers --------------------------------------------------------------------


@pytest.mark.parametrize("option", ["priority", "max_attempts", "timeout", "delay"])
def test_a_bool_where_a_number_is_expected_is_refused_with_one_line(
    app: pgqueue.App, option: str
) -> None:
    @app.task
    def t() -> None: ...

    with pytest.raises(pgqueue.InvalidArguments) as exc:
        t.options(**{option: True}).enqueue()
    assert "not bool" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(pgqueue.InvalidArguments, match="not bool"):
        app.task(name=f"bad_{option}", **{"timeout" if option == "delay" else option: True})(
            lambda: None
        )
    for limit in ("concurrency", "group_concurrency"):
        with pytest.raises(pgqueue.InvalidArguments, match=f"{limit} must be an int"):
            app.queue("q", **{limit: True})


def test_priority_out_of_range_is_one_clear_line_from_the_cli_and_sql(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    for value in ("32768", "-32769", "99999999999999999999"):
        code, _, err = cli(
            capsys, "enqueue", "noop", "--app", APP, "--dsn", dsn, "--priority", value
        )
        assert code == 2 and err.startswith("error: priority must be between -32768 and 32767")
        assert err.count("\n") == 1
    with pytest.raises(psycopg.errors.NumericValueOutOfRange, match="priority must be between"):
        conn.execute("SELECT pgqueue.enqueue('t', priority => 40000)")


# --- keys in NFC ------------------------------------------------------------------------------


def test_one_key_typed_composed_or_decomposed_is_one_key_everywhere(app: pgqueue.App) -> None:
    assert COMPOSED != DECOMPOSED

    @app.task
    def t(n: int = 0) -> None: ...

    first = t.options(idempotency_key=DECOMPOSED).enqueue()
    assert t.options(idempotency_key=COMPOSED).enqueue().id == first.id
    with psycopg.connect(app.dsn, autocommit=True) as c:
        row = c.execute(
            "SELECT pgqueue.enqueue('t', idempotency_key => %s)", (DECOMPOSED,)
        ).fetchone()
        assert row == (first.id,)
        assert c.execute(
            "SELECT idempotency_key FROM pgqueue.runs WHERE id = %s", (first.id,)
        ).fetchone() == (COMPOSED,)

    unique = t.options(unique_key="u-" + DECOMPOSED).enqueue()
    assert unique.created
    assert t.options(unique_key="u-" + COMPOSED).enqueue().id == unique.id
    by_hand = (
        '[{"task": "t", "queue": "default", "priority": 0, "max_attempts": 1, "args": [], '
        f'"kwargs": {{}}, "unique_key": "u-{DECOMPOSED}", "unique_while": "queued"}}]'
    )
    with psycopg.connect(app.dsn, autocommit=True) as c:
        row = c.execute(
            "SELECT run_id, run_created FROM pgqueue.enqueue_unique(%s::jsonb, NULL, NULL, false)",
            (by_hand,),
        ).fetchone()
    assert row == (unique.id, False)
    many = t.options(unique_key=lambda n: f"m-{n}-" + (COMPOSED if n else DECOMPOSED))
    handles = many.enqueue_many([(0,), (1,)])
    assert all(h.created for h in handles)
    again = t.options(unique_key=lambda n: f"m-{n}-" + (DECOMPOSED if n else COMPOSED))
    assert [h.id for h in again.enqueue_many([(0,), (1,)])] == [h.id for h in handles]

    grouped = t.options(group=DECOMPOSED).enqueue()
    app.emit_event("e", key=DECOMPOSED)
    with psycopg.connect(app.dsn, autocommit=True) as c:
        c.execute("SELECT pgqueue.emit_event('e', key => %s)", (DECOMPOSED,))
        assert c.execute(
            "SELECT group_key FROM pgqueue.runs WHERE id = %s", (grouped.id,)
        ).fetchone() == (COMPOSED,)
        assert c.execute("SELECT DISTINCT key FROM pgqueue.events").fetchall() == [(COMPOSED,)]


# --- due times asked for by task code, in a worker process ------------------------------------


def test_task_code_asking_for_a_time_past_the_bounds_fails_only_its_own_attempt(
    dsn: str,
) -> None:
    """RetryAfter(1e300) used to reach complete.sql as now() + 1e300 seconds, an interval
    out of range that failed the statement for every outcome of its batch."""
    app = pgqueue.App(dsn)
    with contextlib.closing(app):
        far = app.enqueue_by_name("timebounds.retry_far")
        nap = app.enqueue_by_name("timebounds.sleep_far")
        plain = [app.enqueue_by_name("timebounds.plain", [n]) for n in range(20)]
        with WorkerProcess(dsn, "tests.apps.timebounds:app", "--concurrency", "8").wait_ready():
            wait_until(
                lambda: all(h.get().finished for h in (far, nap, *plain)),
                timeout=20,
                message="every run to finish",
            )
        assert [h.get().state for h in plain] == ["succeeded"] * 20
        failed = far.get()
        assert failed.state == "failed" and "RetryAfter seconds must be 0 to" in (
            failed.error or ""
        )
        slept = nap.get()
        assert slept.state == "failed" and "sleep_until must be from 1970-01-01" in (
            slept.error or ""
        )


def test_an_event_emitted_with_the_decomposed_key_wakes_a_waiter_of_the_composed_one(
    dsn: str,
) -> None:
    app = pgqueue.App(dsn)
    with contextlib.closing(app):
        composed = app.enqueue_by_name("timebounds.wait_for_key", [COMPOSED])
        decomposed = app.enqueue_by_name("timebounds.wait_for_key", [DECOMPOSED])
        with WorkerProcess(dsn, "tests.apps.timebounds:app").wait_ready():
            for handle in (composed, decomposed):
                wait_until(lambda h=handle: h.get().state == "waiting", timeout=15)
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(
                    "SELECT pgqueue.emit_event('timebounds.tick', %s, '{\"n\": 1}')", (DECOMPOSED,)
                )
            for handle in (composed, decomposed):
                assert handle.wait(timeout=15) == {"n": 1}
