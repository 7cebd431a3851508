"""Cluster-wide limits and fairness, proven with separate worker processes."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import _sql
from tests.apps.basic import EFFECTS_DDL
from tests.apps.limits import app as limits_app
from tests.apps.limits import span
from tests.helpers import WorkerProcess, scalar, wait_until

APP = "tests.apps.limits:app"

SPANS = """
    SELECT substr(s.tag, 7) AS tag, s.at AS t0, e.at AS t1
    FROM effects s JOIN effects e ON e.tag = 'end:' || substr(s.tag, 7)
    WHERE s.tag LIKE 'start:%%'"""


@pytest.fixture
def limits(dsn: str, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute(EFFECTS_DDL)
    limits_app.configure(dsn=dsn)
    return limits_app


def max_overlap(dsn: str, group_of: str = "'all'") -> int:
    """The most spans (start..end of a task) open at one instant, within any group."""
    query = f"""
        WITH spans AS ({SPANS}), g AS (SELECT *, {group_of} AS grp FROM spans)
        SELECT coalesce(max((SELECT count(*) FROM g b
                              WHERE b.grp = a.grp AND b.t0 <= a.t0 AND b.t1 > a.t0)), 0)
        FROM g a"""
    return int(scalar(dsn, query))


def done(app: pgqueue.App, n: int, queue: str) -> bool:
    with app.connection() as c:
        row = c.execute(
            "SELECT count(*) FROM pgqueue.runs WHERE queue = %s AND state = 'succeeded'", (queue,)
        ).fetchone()
    return bool(row and row[0] >= n)


def seq_scans(node: Any) -> list[str]:
    """Relations read by a sequential scan anywhere in an EXPLAIN (FORMAT JSON) plan."""
    found: list[str] = []
    if isinstance(node, dict):
        if node.get("Node Type") == "Seq Scan":
            found.append(node.get("Relation Name", ""))
        for value in node.values():
            found += seq_scans(value)
    elif isinstance(node, list):
        for value in node:
            found += seq_scans(value)
    return found


def workers(dsn: str, n: int, *args: str) -> list[WorkerProcess]:
    return [WorkerProcess(dsn, APP, *args) for _ in range(n)]


def stop_all(procs: list[WorkerProcess]) -> None:
    for p in procs:
        p.stop()


def test_queue_limit_holds_across_processes(dsn: str, limits: pgqueue.App) -> None:
    span.enqueue_many([(f"r{i}", 0.02) for i in range(200)])
    procs = workers(dsn, 4, "--concurrency", "5")
    try:
        for p in procs:
            p.wait_ready()
        wait_until(lambda: done(limits, 200, "limited"), timeout=60, message="200 runs")
    finally:
        stop_all(procs)
    assert max_overlap(dsn) == 2


def test_group_limit_one_per_group_and_all_groups_progress(dsn: str, limits: pgqueue.App) -> None:
    rows = [
        span.options(queue="per_group", group=f"g{i % 20}").enqueue(f"g{i % 20}-{i}", 0.02)
        for i in range(100)
    ]
    procs = workers(dsn, 3, "--concurrency", "8")
    try:
        for p in procs:
            p.wait_ready()
        wait_until(lambda: done(limits, 100, "per_group"), timeout=60, message="100 runs")
    finally:
        stop_all(procs)
    assert len(rows) == 100
    assert max_overlap(dsn, "split_part(tag, '-', 1)") == 1
    assert max_overlap(dsn) > 1  # groups did run in parallel


def test_fairness_new_group_is_served_within_a_few_starts(dsn: str, limits: pgqueue.App) -> None:
    span.options(group="A").enqueue_many([(f"A-{i}", 0.01) for i in range(1000)])
    procs = workers(dsn, 2, "--concurrency", "4")
    try:
        for p in procs:
            p.wait_ready()
        wait_until(lambda: done(limits, 20, "limited"), message="A under way")
        enqueued_at = scalar(dsn, "SELECT clock_timestamp()")
        span.options(group="B").enqueue_many([(f"B-{i}", 0.01) for i in range(10)])
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM effects WHERE tag LIKE 'end:B-%%'") == 10,
            timeout=30,
            message="B to finish",
        )
        a_left = scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE state = 'queued'")
    finally:
        stop_all(procs)
    starts = [
        r[0]
        for r in psycopg.connect(dsn)
        .execute(
            "SELECT tag FROM effects WHERE tag LIKE 'start:%%' AND at > %s ORDER BY at, id",
            (enqueued_at,),
        )
        .fetchall()
    ]
    first_b = next(i for i, tag in enumerate(starts) if tag.startswith("start:B"))
    assert first_b < 4, starts[:10]
    assert a_left > 500  # B finished long before A


def test_priority_jumps_the_line_under_a_limit(dsn: str, limits: pgqueue.App) -> None:
    limits.set_limits("solo", concurrency=1, group_concurrency=None)
    solo = span.options(queue="solo")
    solo.enqueue_many([(f"p0-{i}", 0.01) for i in range(100)])
    urgent = solo.options(priority=-10).enqueue("urgent", 0.01)
    with WorkerProcess(dsn, APP, "--concurrency", "4", "--queues", "solo").wait_ready():
        urgent.wait(timeout=20)
        wait_until(lambda: done(limits, 101, "solo"), timeout=60, message="all runs")
    order = [
        r[0]
        for r in psycopg.connect(dsn)
        .execute("SELECT tag FROM effects WHERE tag LIKE 'start:%%' ORDER BY at, id")
        .fetchall()
    ]
    assert order.index("start:urgent") <= 1  # next after the run already started, if any
    assert max_overlap(dsn) == 1


def test_killed_worker_permits_return_after_lease_expiry(dsn: str, limits: pgqueue.App) -> None:
    # max_attempts=1: once rescued, the long runs fail instead of taking the permits again
    long_runs = span.options(max_attempts=1).enqueue_many([(f"long-{i}", 60) for i in range(2)])
    first = WorkerProcess(dsn, APP, "--lease-seconds", "2").wait_ready()
    with first:
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM effects WHERE tag LIKE 'start:long-%%'") == 2,
            message="both long runs",
        )
        quick = span.enqueue_many([(f"q-{i}", 0.01) for i in range(10)])
        first.kill()
    expiry = scalar(dsn, "SELECT max(lease_expires_at) FROM pgqueue.runs WHERE state = 'running'")
    assert expiry is not None
    with WorkerProcess(dsn, APP, "--lease-seconds", "2", "--concurrency", "6").wait_ready():
        for h in quick:
            h.wait(timeout=30)
    # The dead worker's two permits blocked the queue until its leases expired ...
    first_quick = scalar(dsn, "SELECT min(at) FROM effects WHERE tag LIKE 'start:q-%%'")
    assert first_quick >= expiry
    # ... and then came back: the limit still held afterwards.
    assert [limits.get_run(h.id).state for h in long_runs] == ["failed", "failed"]
    assert max_overlap(dsn) <= 2
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.run_errors WHERE kind = 'lease_expired'") == 2


def test_pause_and_resume_across_workers(dsn: str, limits: pgqueue.App) -> None:
    limits.set_paused("limited", True)
    procs = workers(dsn, 2)
    try:
        for p in procs:
            p.wait_ready()
        hs = span.enqueue_many([(f"x{i}", 0.0) for i in range(5)])
        with pytest.raises(AssertionError):  # nothing runs while paused
            wait_until(lambda: done(limits, 1, "limited"), timeout=1.0, message="a run")
        limits.set_paused("limited", False)
        for h in hs:
            assert h.wait(timeout=5) == h.get().args[0]
    finally:
        stop_all(procs)
    assert all(p.proc.poll() is not None for p in procs)


def test_limited_claim_does_not_read_a_full_groups_backlog(conn: psycopg.Connection[Any]) -> None:
    conn.execute("""
        INSERT INTO pgqueue.queues (name, group_concurrency) VALUES ('q', 1);
        INSERT INTO pgqueue.runs (task, queue, group_key, state)
        SELECT 't', 'q', 'big', 'queued' FROM generate_series(1, 100000);
        INSERT INTO pgqueue.runs (task, queue, group_key, state, lease_token, lease_expires_at)
        VALUES ('t', 'q', 'big', 'running', gen_random_uuid(), now() + interval '1 hour');
        INSERT INTO pgqueue.runs (task, queue, group_key, state)
        VALUES ('t', 'q', 'small', 'queued');
        ANALYZE pgqueue.runs;
    """)
    params = {
        "queue": "q",
        "limit": 10,
        "worker_id": "00000000-0000-0000-0000-000000000001",
        "lease_seconds": 30,
    }
    with conn.transaction(force_rollback=True):
        conn.execute(_sql.query("lock_queue"), {"queue": "q"})
        plan = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + _sql.query("claim_limited"), params
        ).fetchone()[0]  # type: ignore[index]
    text = json.dumps(plan)
    assert not [n for n in seq_scans(plan) if n == "runs"], "the claim scanned pgqueue.runs"
    assert "runs_group_claim_idx" in text
    top = plan[0]["Plan"]
    touched = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    assert touched < 500, f"claim touched {touched} blocks: it read the backlog"
    with conn.transaction():
        conn.execute(_sql.query("lock_queue"), {"queue": "q"})
        claimed = conn.execute(_sql.query("claim_limited"), params).fetchall()
    assert [r[10] for r in claimed] == ["small"]
