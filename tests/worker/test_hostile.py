"""Hostile input and hostile task code, against real worker processes (docs/security.md):
notifications are hints, one undecodable run harms no other, and task code cannot stop
the worker."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator

import psycopg
import pytest

from tests.apps import hostile
from tests.helpers import WorkerProcess, login_role, scalar, wait_until

pytestmark = pytest.mark.slow

APP = "tests.apps.hostile:app"


@pytest.fixture
def happ(dsn: str) -> Iterator[None]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(hostile.EXECUTIONS_DDL)
    hostile.app.configure(dsn=dsn)
    try:
        yield
    finally:
        hostile.app.close()


@contextlib.contextmanager
def worker(dsn: str, *args: str) -> Iterator[WorkerProcess]:
    with WorkerProcess(dsn, APP, *args) as proc:
        try:
            yield proc.wait_ready()
        finally:
            if proc.proc.poll() is None:
                proc.proc.kill()
                proc.proc.wait(10)
            with contextlib.suppress(ValueError, OSError):
                print(f"--- worker {proc.pid} exited {proc.proc.returncode} ---\n{proc.output()}")


@pytest.fixture
def stranger(dsn: str) -> Iterator[str]:
    """The DSN of a LOGIN role with no grant at all on the test database's objects."""
    with login_role(dsn, "pgqueue_stranger") as role_dsn:
        yield role_dsn


def executions(dsn: str, tag: str) -> list[tuple[bool, bool]]:
    """(ended, stopped) of every execution of the runs tagged `tag`."""
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute(
            "SELECT ended, stopped FROM executions WHERE tag = %s ORDER BY id", (tag,)
        ).fetchall()
    return [(bool(a), bool(b)) for a, b in rows]


def run_state(dsn: str, run_id: int) -> tuple[str, int]:
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute(
            "SELECT state, attempt FROM pgqueue.runs WHERE id = %s", (run_id,)
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def error_kinds(dsn: str, run_id: int) -> list[tuple[str, str]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute(
            "SELECT kind, message FROM pgqueue.run_errors WHERE run_id = %s ORDER BY attempt",
            (run_id,),
        ).fetchall()
    return [(k, m) for k, m in rows]


# -- notifications are hints ----------------------------------------------------------------


def test_a_flood_of_forged_cancels_from_a_role_without_grants_stops_nothing(
    happ: None, dsn: str, stranger: str
) -> None:
    with worker(dsn, "--lease-seconds", "3") as w:
        h = hostile.hold.enqueue("flooded", 6.0)
        wait_until(lambda: executions(dsn, "flooded"), message="the run to start")
        with psycopg.connect(stranger, autocommit=True) as c:
            # distinct payloads: a transaction's identical notifications are sent once
            c.execute(
                "SELECT count(pg_notify('pgqueue_cancel', g::text)) "
                "FROM generate_series(1, 300000) g"
            )
            for _ in range(20):
                c.execute("SELECT pg_notify('pgqueue_cancel', %s)", (str(h.id),))
        wait_until(
            lambda: run_state(dsn, h.id)[0] in ("succeeded", "failed"),
            timeout=30,
            message="the run to finish",
        )
        assert run_state(dsn, h.id) == ("succeeded", 1)
        assert executions(dsn, "flooded") == [(True, False)]
        assert error_kinds(dsn, h.id) == []
        assert w.proc.poll() is None


def test_a_real_cancel_still_stops_a_running_run_promptly(
    happ: None, dsn: str, stranger: str
) -> None:
    with worker(dsn):
        h = hostile.hold.enqueue("canceled", 60.0)
        wait_until(lambda: executions(dsn, "canceled"), message="the run to start")
        with psycopg.connect(stranger, autocommit=True) as c:
            # payloads that str.isdigit() accepts and int() does not, or not quickly
            for payload in ("\u00b2", "\u0661\u00b2", "9" * 5000):
                c.execute("SELECT pg_notify('pgqueue_cancel', %s)", (payload,))
        t0 = time.monotonic()
        assert hostile.app.cancel(h.id)
        wait_until(lambda: executions(dsn, "canceled")[0][0], timeout=10, message="the stop")
        assert time.monotonic() - t0 < 2
        assert executions(dsn, "canceled") == [(True, True)]
        assert run_state(dsn, h.id)[0] == "canceled"


# -- one undecodable run harms no other -----------------------------------------------------


def test_a_run_nested_too_deep_fails_alone_and_its_claim_runs(happ: None, dsn: str) -> None:
    handles = [hostile.good.enqueue(f"g{i}") for i in range(10)]
    bad, bad_kwargs = handles[4], handles[7]
    deep = "[" * 5000 + "]" * 5000  # jsonb takes it; Python's decoder stops near 1,000
    deep_object = '{"a": ' * 5000 + "0" + "}" * 5000
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("UPDATE pgqueue.runs SET args = %s::jsonb WHERE id = %s", (deep, bad.id))
        c.execute(
            "UPDATE pgqueue.runs SET kwargs = %s::jsonb WHERE id = %s",
            (deep_object, bad_kwargs.id),
        )
    with WorkerProcess(dsn, APP, "--burst", "--concurrency", "10") as w:
        try:
            code = w.wait(20)
        finally:
            print(w.output())
    assert code == 0
    assert run_state(dsn, bad.id) == ("failed", 1)
    [(kind, message)] = error_kinds(dsn, bad.id)
    assert kind == "invalid_arguments"
    assert message.startswith("the run's args cannot be decoded: nested deeper than"), message
    assert "\n" not in message
    assert run_state(dsn, bad_kwargs.id) == ("failed", 1)
    [(kind, message)] = error_kinds(dsn, bad_kwargs.id)
    assert (kind, message[:39]) == ("invalid_arguments", "the run's kwargs cannot be decoded: nes")
    for i, h in enumerate(handles):
        if h not in (bad, bad_kwargs):
            assert run_state(dsn, h.id) == ("succeeded", 1)
            assert executions(dsn, f"g{i}") == [(True, False)]


# -- task code cannot stop the worker --------------------------------------------------------


def stop(w: WorkerProcess, within: float) -> None:
    """SIGTERM: the worker drains and exits 0 (its own code, not a task's) in time."""
    t0 = time.monotonic()
    w.signal(signal.SIGTERM)
    assert w.wait(within + 10) == 0
    assert time.monotonic() - t0 < within


@pytest.mark.parametrize("what", ["exit", "interrupt", "custom"])
def test_a_base_exception_from_task_code_fails_the_attempt_and_the_worker_goes_on(
    happ: None, dsn: str, what: str
) -> None:
    with worker(dsn) as w:
        from_async = hostile.async_raises.enqueue(f"async-{what}", what)
        from_sync = hostile.sync_raises.enqueue(f"sync-{what}", what)  # and its on_failure
        from_hook = hostile.hook_raises.enqueue(f"hook-{what}", what)  # on_success raises
        for h in (from_async, from_sync):
            wait_until(
                lambda h=h: run_state(dsn, h.id)[0] not in ("queued", "running"),
                timeout=10,
                message=f"run {h.id} to end",
            )
            assert run_state(dsn, h.id) == ("failed", 1)
            [(kind, message)] = error_kinds(dsn, h.id)
            assert kind == "error"
            name = {"exit": "SystemExit", "interrupt": "KeyboardInterrupt", "custom": "Custom"}
            assert message.startswith(name[what]), message
        wait_until(lambda: run_state(dsn, from_hook.id)[0] == "succeeded", timeout=10)
        after = hostile.good.enqueue(f"after-{what}")
        wait_until(lambda: run_state(dsn, after.id)[0] == "succeeded", timeout=10)
        assert w.proc.poll() is None
        stop(w, 5)


def test_an_async_task_that_swallows_its_timeout_still_times_out(happ: None, dsn: str) -> None:
    with worker(dsn, "--concurrency", "1") as w:
        h = hostile.stubborn.enqueue("stubborn", 4.0)  # timeout=1, ignores its cancellation
        wait_until(lambda: executions(dsn, "stubborn"), message="the run to start")
        t0 = time.monotonic()
        wait_until(lambda: run_state(dsn, h.id)[0] == "failed", timeout=10, message="a timeout")
        assert time.monotonic() - t0 < 2.5
        assert [kind for kind, _ in error_kinds(dsn, h.id)] == ["timeout"]
        # Its coroutine still runs (for about 3 s more): its slot is still taken.
        after = hostile.good.enqueue("after-stubborn")
        time.sleep(0.5)  # not synchronisation: proving that nothing starts meanwhile
        assert run_state(dsn, after.id)[0] == "queued"
        wait_until(lambda: run_state(dsn, after.id)[0] == "succeeded", timeout=10)
        assert run_state(dsn, h.id) == ("failed", 1)  # its late return changed nothing
        assert [kind for kind, _ in error_kinds(dsn, h.id)] == ["timeout"]
        stop(w, 5)


def test_sigterm_ends_a_worker_whose_task_swallows_every_cancellation(happ: None, dsn: str) -> None:
    with worker(dsn, "--grace", "1") as w:
        h = hostile.immortal.enqueue("immortal")
        wait_until(lambda: executions(dsn, "immortal"), message="the run to start")
        stop(w, 1 + 5)
        assert run_state(dsn, h.id) == ("queued", 0)  # released: it runs again elsewhere


def test_a_flood_of_config_notifications_reads_the_limits_a_few_times(
    happ: None, dsn: str, stranger: str
) -> None:
    """Counted by the scans of pgqueue.queues (the limits' query reads it; so does each
    claim), read once the worker exited: a backend's counts reach pg_stat_user_tables
    when it ends."""

    def scans() -> int:
        return int(
            scalar(
                dsn,
                "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables"
                " WHERE schemaname = 'pgqueue' AND relname = 'queues'",
            )
            or 0
        )

    notes = 2_000
    with worker(dsn, "--poll-interval", "60") as w:
        before = scans()
        with psycopg.connect(stranger, autocommit=True) as c:
            for _ in range(notes):  # one transaction each: a transaction sends a note once
                c.execute("SELECT pg_notify('pgqueue_config', 'default')")
        time.sleep(1)  # not synchronisation: the time the worker would spend on them
        stop(w, 10)
    assert scans() - before < notes / 10
