"""Day-2 operations: inspection views (fast on a million runs), enqueue from a trigger,
the worker's retention, Prometheus metrics and structured logs (the commands:
tests/cli/test_operations_cli.py)."""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import pgqueue
from pgqueue.dashboard import data
from pgqueue.ops.retention import parse_duration, prune_step
from tests.dashboard.test_data import FILTERS, START, rows_read
from tests.helpers import InProcessWorker, WorkerProcess, free_port, scalar, wait_until
from tests.sql.test_explain import plan, plan_of, scans

OPS_APP = "tests.apps.ops:app"
WORKER = "00000000-0000-0000-0000-0000000000aa"


def insert_run(conn: psycopg.Connection[Any], **cols: Any) -> int:
    """A run row as the worker would leave it, with `cols` overriding the defaults."""
    values = {"task": "t", "queue": "default", "state": "queued"} | cols
    if values["state"] == "running":
        values.setdefault("lease_token", "00000000-0000-0000-0000-000000000001")
        values.setdefault("lease_expires_at", datetime.now(UTC) + timedelta(hours=1))
        values.setdefault("worker_id", WORKER)
    names = ", ".join(values)
    marks = ", ".join(f"%({k})s" for k in values)
    row = conn.execute(
        f"INSERT INTO pgqueue.runs ({names}) VALUES ({marks}) RETURNING id",
        values,
    ).fetchone()
    assert row is not None
    return int(row[0])


def ago(seconds: float) -> str:
    return f"now() - interval '{seconds} seconds'"


def finished(conn: psycopg.Connection[Any], state: str, age: timedelta, **cols: Any) -> int:
    run_id = insert_run(conn, state=state, **cols)
    conn.execute(
        "UPDATE pgqueue.runs SET finished_at = now() - %s, started_at = now() - %s - interval"
        " '2 seconds', run_at = now() - %s - interval '3 seconds' WHERE id = %s",
        (age, age, age, run_id),
    )
    return run_id


# -- views -------------------------------------------------------------------------------


def test_inspection_views(conn: psycopg.Connection[Any]) -> None:
    insert_run(conn, queue="mail")
    oldest = insert_run(conn, queue="mail")
    conn.execute(
        "UPDATE pgqueue.runs SET run_at = now() - interval '90 seconds' WHERE id = %s", (oldest,)
    )
    insert_run(conn, queue="mail", state="scheduled", run_at="9999-12-31 00:00:00+00")
    running = insert_run(conn, queue="mail", state="running", started_at="now")
    finished(conn, "succeeded", timedelta(seconds=10), queue="mail")
    finished(conn, "succeeded", timedelta(minutes=30), queue="mail")
    failed = finished(conn, "failed", timedelta(seconds=5), queue="mail", error="ValueError: x")
    finished(conn, "succeeded", timedelta(days=3), queue="mail")  # outside every window
    conn.execute(
        "INSERT INTO pgqueue.run_errors (run_id, attempt, kind, message, traceback) VALUES"
        " (%(id)s, 1, 'timeout', 'first', NULL), (%(id)s, 2, 'error', 'ValueError: x', 'tb')",
        {"id": failed},
    )
    conn.execute("INSERT INTO pgqueue.queues (name, paused) VALUES ('idle', true)")
    conn.execute(
        "INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version, heartbeat_at)"
        " VALUES (%s, 'h1', 1, '{mail}', 4, 'x', now()),"
        " ('00000000-0000-0000-0000-0000000000bb', 'h2', 2, '{mail}', 4, 'x',"
        "  now() - interval '5 minutes')",
        (WORKER,),
    )
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        stats = {r["queue"]: r for r in cur.execute("SELECT * FROM pgqueue.queue_stats")}
        mail = stats["mail"]
        assert (mail["queued"], mail["scheduled"], mail["running"], mail["waiting"]) == (2, 1, 1, 0)
        assert 89 < mail["oldest_queued_seconds"] < 120
        assert (mail["finished_last_minute"], mail["finished_last_hour"]) == (2, 3)
        assert (mail["succeeded_last_hour"], mail["failed_last_hour"]) == (2, 1)
        assert mail["pickup_p50_seconds"] == pytest.approx(1.0, abs=0.01)
        assert mail["duration_p95_seconds"] == pytest.approx(2.0, abs=0.01)
        assert stats["idle"]["paused"] is True and stats["idle"]["queued"] == 0

        [row] = cur.execute("SELECT * FROM pgqueue.running").fetchall()
        assert (row["id"], row["host"], row["pid"]) == (running, "h1", 1)
        assert 3000 < row["lease_left_seconds"] <= 3600

        [row] = cur.execute("SELECT * FROM pgqueue.failed").fetchall()
        assert (row["id"], row["error"], row["error_kind"], row["traceback"]) == (
            failed,
            "ValueError: x",
            "error",
            "tb",
        )
        live = cur.execute("SELECT host, running FROM pgqueue.workers_live").fetchall()
        assert live == [{"host": "h1", "running": 1}]


def test_views_and_retention_read_indexes_on_a_million_runs(
    conn: psycopg.Connection[Any],
) -> None:
    started = time.monotonic()
    conn.execute("""
        INSERT INTO pgqueue.runs (task, queue, state, finished_at, started_at, run_at)
        SELECT 't' || (g % 7), 'q' || (g % 5),
               CASE WHEN g % 50 = 0 THEN 'failed' ELSE 'succeeded' END,
               now() - g * interval '1 second', now() - g * interval '1 second',
               now() - g * interval '1 second'
        FROM generate_series(1, 960000) g;
        INSERT INTO pgqueue.runs (task, queue, state, run_at)
        SELECT 't', 'q' || (g % 5), 'queued', now() FROM generate_series(1, 20000) g;
        INSERT INTO pgqueue.runs (task, queue, state, run_at)
        SELECT 't', 'q' || (g % 5), 'scheduled', now() + interval '1 day'
        FROM generate_series(1, 20000) g;
        INSERT INTO pgqueue.events (event, created_at)
        SELECT 'e', now() - g * interval '1 minute' FROM generate_series(1, 20000) g;
        ANALYZE pgqueue.events;
    """)
    conn.execute("VACUUM ANALYZE pgqueue.runs")
    print(f"1,000,000 runs in {time.monotonic() - started:.1f}s")
    for view in (
        "SELECT * FROM pgqueue.queue_stats",
        "SELECT * FROM pgqueue.running",
        "SELECT * FROM pgqueue.failed ORDER BY finished_at DESC LIMIT 50",
        "SELECT * FROM pgqueue.workers_live",
    ):
        rows = conn.execute(f"EXPLAIN (FORMAT JSON) {view}").fetchall()
        found = scans(json.dumps(rows[0][0]))
        assert all("Seq Scan" not in kind for kind, _ in found), (view, found)
        began = time.monotonic()
        conn.execute(view).fetchall()
        assert time.monotonic() - began < 1.0, view
    [q0] = conn.execute(
        "SELECT queued, scheduled FROM pgqueue.queue_stats WHERE queue = 'q0'"
    ).fetchall()
    assert q0 == (4000, 4000)

    for state, index in (("succeeded", "runs_finished_queue_idx"), ("failed", "runs_failed_idx")):
        query, params = prune_step(state, timedelta(days=1), 1000, tallied_only=True)
        found = scans(plan_of(conn, query, params))
        assert all("Seq Scan" not in kind for kind, _ in found), found
        assert index in {name for _, name in found}, found
    # The dashboard's list of finished runs of every queue: each queue's next SCAN keys
    # from runs_finished_queue_idx alone, SCAN runs fetched by id; a page well under 0.1 s
    for filt in (data.RunFilter(state="succeeded"), data.RunFilter(state="canceled")):
        query, _ = data.runs_query(filt)
        page = {**FILTERS, **START, **filt.params(), "state": filt.state}
        read = rows_read(conn, query, page)
        assert read["runs_finished_queue_idx"] <= 5 * (data.SCAN + 2), read
        assert read["runs_pkey"] <= data.SCAN, read
        took = []
        for _ in range(3):
            began = time.monotonic()
            conn.execute(query, page, prepare=True).fetchall()
            took.append(time.monotonic() - began)
        assert min(took) < 0.1, took
    events_plan = plan(conn, "prune_events", {"older_than": 19900 * 60.0, "limit": 1000})
    assert "events_created_idx" in events_plan and "Seq Scan" not in events_plan
    found = scans(plan(conn, "queue_depth", {"queues": ["q0", "q1"]}))
    assert found and all("Seq Scan" not in kind for kind, _ in found), found


# -- SQL API from a trigger ------------------------------------------------------------


def test_a_trigger_enqueues_with_pgqueue_enqueue_and_a_worker_runs_it(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("""
        CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, total int);
        CREATE FUNCTION order_placed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pgqueue.enqueue('ops.ok', jsonb_build_array(NEW.total), queue => 'orders',
                                    idempotency_key => 'order:' || NEW.id);
            RETURN NEW;
        END $$;
        CREATE TRIGGER order_placed AFTER INSERT ON orders
            FOR EACH ROW EXECUTE FUNCTION order_placed();
    """)

    @app.task(name="ops.ok", queue="orders")
    def ok(n: int = 0) -> int:
        return n * 2

    with conn.transaction():
        conn.execute("INSERT INTO orders (total) VALUES (21)")
    with pytest.raises(ZeroDivisionError), conn.transaction():
        conn.execute("INSERT INTO orders (total) VALUES (99)")
        raise ZeroDivisionError  # rolled back: no run for this order
    with InProcessWorker(app):
        wait_until(
            lambda: scalar(app.dsn, "SELECT state FROM pgqueue.runs") == "succeeded",
            message="the trigger's run to succeed",
        )
    [run] = app.list_runs()
    assert (run.task, run.queue, run.args, run.result, run.idempotency_key) == (
        "ops.ok",
        "orders",
        [21],
        42,
        "order:1",
    )


# -- retention ---------------------------------------------------------------------------


def test_parse_duration() -> None:
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration("1d12h") == timedelta(days=1, hours=12)
    assert parse_duration("90") == timedelta(seconds=90)
    assert parse_duration("2w") == timedelta(weeks=2)
    with pytest.raises(pgqueue.UserError, match="invalid duration"):
        parse_duration("7 days")


def test_worker_prunes_with_its_retention(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    keep = {
        finished(conn, "succeeded", timedelta(days=6)),
        finished(conn, "failed", timedelta(days=8)),  # failed runs are kept 30 days
        finished(conn, "canceled", timedelta(days=29)),
    }
    gone = {finished(conn, "succeeded", timedelta(days=8)) for _ in range(5)}
    gone |= {
        finished(conn, "failed", timedelta(days=31)),
        finished(conn, "canceled", timedelta(days=31)),
    }
    # A finished child of a parent that has not finished stays: the parent reads it.
    parent = insert_run(conn, state="waiting", run_at="9999-12-31 00:00:00+00")
    keep.add(finished(conn, "succeeded", timedelta(days=8), parent_id=parent))
    keep.add(parent)
    conn.execute(
        "INSERT INTO pgqueue.events (event, created_at) VALUES ('old', now() - interval '31 days'),"
        " ('new', now() - interval '29 days')"
    )
    # The audit log's entries are kept 90 days.
    conn.execute(
        "INSERT INTO pgqueue.audit (at, actor, action) SELECT now() - interval '91 days',"
        " 'cli', 'cancel' FROM generate_series(1, 3)"
    )
    conn.execute(
        "INSERT INTO pgqueue.audit (at, actor, action) VALUES (now() - interval '89 days',"
        " 'cli', 'retry')"
    )
    retention = pgqueue.Retention(batch=2)  # default ages, tiny batches
    with InProcessWorker(app, retention=retention, queues=["none"]):
        wait_until(
            lambda: (
                scalar(app.dsn, "SELECT count(*) FROM pgqueue.events") == 1
                and scalar(app.dsn, "SELECT array_agg(action) FROM pgqueue.audit") == ["retry"]
            ),
            message="the pruner's first round",
        )
    assert {r[0] for r in conn.execute("SELECT id FROM pgqueue.runs")} == keep
    assert not gone & keep


def test_no_pruning_with_retention_none(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    run_id = finished(conn, "succeeded", timedelta(days=365))

    @app.task(name="ops.ok")
    def ok(n: int = 0) -> int:
        return n

    h = ok.enqueue(1)
    with InProcessWorker(app, retention=None):
        assert h.wait(timeout=10) == 1
    assert scalar(app.dsn, "SELECT count(*) FROM pgqueue.runs WHERE id = %s", (run_id,)) == 1


# -- metrics and logs -------------------------------------------------------------------


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_endpoint_and_json_logs(app: pgqueue.App) -> None:
    port = free_port()
    ok = [app.enqueue_by_name("ops.ok", [n]) for n in range(3)]
    boom = app.enqueue_by_name("ops.boom", max_attempts=2)
    worker = WorkerProcess(
        app.dsn, OPS_APP, "--metrics-port", str(port), "--log-format", "json"
    ).wait_ready()
    try:
        by_task = (("queue", "default"), ("task", "ops.ok"))
        boom_labels = (("queue", "default"), ("task", "ops.boom"))

        def counted() -> Any:
            m = scrape(port)
            done = (
                m.get(("pgqueue_runs_succeeded_total", by_task)) == 3
                and m.get(("pgqueue_runs_failed_total", boom_labels)) == 1
            )
            return m if done else None

        metrics = wait_until(counted, message="the runs to show in the metrics")
        assert metrics[("pgqueue_runs_started_total", by_task)] == 3
        assert metrics[("pgqueue_runs_started_total", boom_labels)] == 2
        assert metrics[("pgqueue_runs_retried_total", boom_labels)] == 1
        assert metrics[("pgqueue_run_duration_seconds_count", by_task)] == 3
        assert metrics[("pgqueue_pickup_latency_seconds_count", (("queue", "default"),))] >= 5
        depth = [k for k in metrics if k[0] == "pgqueue_queue_depth"]
        assert (("queue", "default"), ("state", "queued")) in {labels for _, labels in depth}
    finally:
        worker.signal(signal.SIGTERM)
        code = worker.wait(20)
        output = worker.output()
        worker.stop()
    assert code == 0, output
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert len(lines) == len(output.splitlines()), output  # every line is JSON
    events = {(r.get("run_id"), r.get("event")) for r in lines if r["logger"] == "pgqueue.worker"}
    for h in ok:
        assert {(h.id, "started"), (h.id, "succeeded")} <= events
    assert {(boom.id, "retried"), (boom.id, "failed")} <= events
    [failure] = [r for r in lines if r.get("run_id") == boom.id and r.get("event") == "failed"]
    assert failure["level"] == "INFO" and failure["state"] == "failed"
    assert failure["error"] == "RuntimeError: boom" and failure["task"] == "ops.boom"


def test_metrics_port_in_use_is_a_config_error(app: pgqueue.App) -> None:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(pgqueue.ConfigError, match="cannot serve metrics"):
            app.worker(metrics_port=port, install_signal_handlers=False).run(burst=True)


# -- stats -------------------------------------------------------------------------------
