"""Bulk cancel and retry (pgqueue.ops.bulk, App.cancel_where/retry_where/purge_queue): the
filters, the batches (one transaction each), the runs that existed when the action began,
and a running run canceled as pgqueue.cancel() cancels it, in a real worker process."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.ops import bulk as _bulk
from tests.apps.basic import EFFECTS_DDL
from tests.helpers import WorkerProcess, run_state, scalar, scalar_conn, wait_until

Conn = psycopg.Connection[Any]


def states(conn: Conn) -> dict[tuple[str, str], int]:
    rows = conn.execute("SELECT queue, state, count(*) FROM pgqueue.runs GROUP BY 1, 2")
    return {(q, s): n for q, s, n in rows}


def fill(conn: Conn, queue: str, state: str, n: int, **extra: str) -> None:
    cols = ", ".join(["task", "queue", "state", "finished_at", *extra])
    values = ", ".join(["%s"] * (4 + len(extra)))
    finished = "now()" if state in ("succeeded", "failed", "canceled") else None
    conn.execute(
        f"INSERT INTO pgqueue.runs ({cols}) SELECT {values} FROM generate_series(1, %s)",
        ("t", queue, state, finished, *extra.values(), n),
    )


def test_cancel_where_reaches_only_what_the_filters_name(app: pgqueue.App, conn: Conn) -> None:
    fill(conn, "mail", "queued", 5)
    fill(conn, "mail", "scheduled", 2)
    fill(conn, "web", "queued", 3)
    fill(conn, "mail", "succeeded", 4)
    conn.execute("UPDATE pgqueue.runs SET group_key = 'tenant-1' WHERE id IN (1, 2)")
    assert app.count_where("cancel", queue="mail") == 7
    assert app.cancel_where(queue="mail", group="tenant-1") == 2
    assert app.cancel_where(queue="mail", state="scheduled") == 2
    assert app.cancel_where(queue="mail") == 3  # the rest; finished runs are not reached
    assert states(conn) == {
        ("mail", "canceled"): 7,
        ("web", "queued"): 3,
        ("mail", "succeeded"): 4,
    }
    assert app.cancel_where(queue="mail") == 0


def test_older_than_reads_the_creation_time(app: pgqueue.App, conn: Conn) -> None:
    fill(conn, "q", "queued", 3)
    conn.execute("UPDATE pgqueue.runs SET created_at = now() - interval '2 hours' WHERE id = 1")
    assert app.cancel_where(older_than=timedelta(hours=1)) == 1
    assert app.cancel_where(older_than=3600) == 0
    assert run_state(conn, 1) == "canceled"


def test_retry_where_queues_finished_runs_again_and_records_each(
    app: pgqueue.App, conn: Conn
) -> None:
    fill(conn, "q", "failed", 6)
    fill(conn, "q", "succeeded", 2)
    fill(conn, "q", "queued", 1)
    assert app.retry_where(state="failed", batch_size=4) == 6
    assert states(conn) == {("q", "queued"): 7, ("q", "succeeded"): 2}
    retried = scalar_conn(conn, "SELECT count(*) FROM pgqueue.run_errors WHERE kind = 'retried'")
    assert retried == 6
    # a retried run keeps its id: a second pass finds none of them finished
    assert app.retry_where(state="failed") == 0


def test_each_batch_is_its_own_transaction(app: pgqueue.App, conn: Conn) -> None:
    """2,500 runs in batches of 1,000: three transactions changed them (each row version
    carries the id of the transaction that wrote it), not one long one."""
    fill(conn, "big", "queued", 2500)
    assert app.cancel_where(queue="big", batch_size=1000) == 2500
    writers = scalar_conn(
        conn, "SELECT count(DISTINCT xmin::text) FROM pgqueue.runs WHERE state = 'canceled'"
    )
    assert writers == 3


def test_runs_enqueued_after_the_action_began_are_left_alone(conn: Conn) -> None:
    """A cancel batch reaches runs up to `upto`, the newest id when the action began (act()
    reads it once, before its first batch): runs enqueued since then stay queued."""
    fill(conn, "q", "queued", 3)
    upto = scalar_conn(conn, "SELECT max(id) FROM pgqueue.runs")
    fill(conn, "q", "queued", 2)
    filt = _bulk.Filter.of(queue="q")
    query = _bulk.cancel_query("queued", 10)
    params = filt.params() | {"upto": upto}
    assert conn.execute(query, params).fetchone() == (3, 3)
    assert conn.execute(query, params).fetchone() == (0, 0)
    assert states(conn) == {("q", "canceled"): 3, ("q", "queued"): 2}


def test_a_retry_reaches_each_run_once_even_if_it_fails_again(conn: Conn) -> None:
    """A retry batch reaches runs that finished by `upto_at`: a retried run that fails
    again before the next batch finishes later, and is not retried twice."""
    fill(conn, "q", "failed", 4)
    conn.execute("UPDATE pgqueue.runs SET finished_at = now() - interval '1 minute'")
    start = scalar_conn(conn, "SELECT now()")
    filt = _bulk.Filter.of(queue="q")
    query = _bulk.with_states("bulk_retry", filt.states_for("retry"), 2)
    params = filt.params() | {"upto_at": start, "after_at": _bulk.EPOCH, "after_id": 0}
    last_at, last_id, changed = conn.execute(query, params).fetchone() or ()
    assert (last_id, changed) == (2, 2)
    # the two retried runs fail again at once
    conn.execute("UPDATE pgqueue.runs SET state = 'failed', finished_at = now() WHERE id <= 2")
    params |= {"after_at": last_at, "after_id": last_id}
    assert conn.execute(query, params).fetchone()[1:] == (4, 2)  # type: ignore[index]
    params["after_id"] = 4
    assert conn.execute(query, params).fetchone()[1:] == (None, 0)  # type: ignore[index]
    retried = conn.execute(
        "SELECT run_id, count(*) FROM pgqueue.run_errors GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert retried == [(1, 1), (2, 1), (3, 1), (4, 1)]


def test_a_filter_is_required_unless_all_runs(app: pgqueue.App, conn: Conn) -> None:
    fill(conn, "a", "queued", 2)
    fill(conn, "b", "failed", 1)
    with pytest.raises(_bulk.BulkError, match="no filter given"):
        app.cancel_where()
    assert app.cancel_where(all_runs=True) == 2
    assert app.retry_where(all_runs=True) == 3


@pytest.mark.parametrize(
    ("call", "kwargs", "message"),
    [
        ("retry_where", {"state": "queued"}, "cannot retry runs that are queued"),
        ("cancel_where", {"state": "failed"}, "cannot cancel runs that are failed"),
        ("cancel_where", {"state": "lost"}, "unknown state 'lost'"),
        ("cancel_where", {"queue": "a\x00b"}, "filter queue must be a name"),
        ("cancel_where", {"older_than": -1}, "older_than must not be negative"),
        ("cancel_where", {"queue": "q", "batch_size": 0}, "batch_size must be between"),
    ],
)
def test_bad_bulk_requests_say_what_is_wrong(
    app: pgqueue.App, call: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(pgqueue.UserError, match=message):
        getattr(app, call)(**kwargs)


def test_purge_cancels_what_has_not_started(app: pgqueue.App, conn: Conn) -> None:
    fill(conn, "q", "queued", 3)
    fill(conn, "q", "scheduled", 2)
    fill(conn, "q", "waiting", 1)
    fill(conn, "other", "queued", 1)
    assert app.purge_queue("q") == 5
    assert states(conn) == {("q", "canceled"): 5, ("q", "waiting"): 1, ("other", "queued"): 1}


def test_a_bulk_cancel_of_a_limited_running_run_keeps_its_permit(conn: Conn, dsn: str) -> None:
    """pgqueue.cancel()'s own rule, through the bulk path: a canceled running attempt of a
    limited queue files its permit until its code ends."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, concurrency) VALUES ('lim', 1);
        INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version)
        VALUES ('00000000-0000-0000-0000-000000000002', 'h', 1, '{lim}', 1, 'x');
        INSERT INTO pgqueue.runs (task, queue, state, limited, worker_id, lease_token,
                                  lease_expires_at)
        VALUES ('t', 'lim', 'running', true, '00000000-0000-0000-0000-000000000002',
                gen_random_uuid(), now() + interval '30 s');
    """)
    app = pgqueue.App(dsn)
    try:
        assert app.cancel_where(queue="lim", state="running") == 1
    finally:
        app.close()
    assert scalar_conn(conn, "SELECT count(*) FROM pgqueue.zombie_permits") == 1


def test_a_bulk_cancel_stops_running_attempts_in_a_worker_process(
    app: pgqueue.App, conn: Conn, dsn: str
) -> None:
    conn.execute(EFFECTS_DDL)
    handles = [app.enqueue_by_name("bulk.patient", [f"p{i}"], queue="patient") for i in range(3)]
    with WorkerProcess(dsn, "tests.apps.bulk:app", "--queues", "patient") as worker:
        worker.wait_ready()
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM effects WHERE tag LIKE 'start:%%'") == 3,
            message="three attempts to start",
        )
        assert app.cancel_where(queue="patient", state="running") == 3
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM effects WHERE tag LIKE 'stopped:%%'") == 3,
            message="the attempts to see their cancel",
        )
    assert {app.get_run(h.id).state for h in handles} == {"canceled"}
