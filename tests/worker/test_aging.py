"""Priority aging (docs/flow_control.md): a waiting run's priority improves by one step
per interval, so a run of priority 0 starts under a stream of priority -10 runs that
would otherwise hold it back for ever; the aging pass reads an index, and the claim is
the one it was."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import sql as _sql
from pgqueue.tasks.registry import QueueConfig
from pgqueue.worker.maintenance.aging import AGING_PERIOD
from pgqueue.worker.registration import register
from tests.apps.basic import EFFECTS_DDL
from tests.apps.flow import aged
from tests.apps.flow import app as flow_app
from tests.cli.helpers import assert_user_error, cli
from tests.helpers import WorkerProcess, scalar, wait_until
from tests.sql.test_explain import plan, relation_scans

APP = "tests.apps.flow:app"
AGING = 0.1  # tests/apps/flow.py: app.queue("aging", priority_aging=0.1)
BEST = -10  # the stream's priority


@pytest.fixture
def flow(dsn: str, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute(EFFECTS_DDL)
    flow_app.configure(dsn=dsn)
    return flow_app


def test_a_starved_run_starts_within_the_bound_under_a_stream_of_urgent_runs(
    dsn: str, flow: pgqueue.App
) -> None:
    """Two workers of 1 slot each drain about 40 runs a second; a feeder enqueues 80 a second
    of priority -10, so that without aging the backlog only grows and a run of priority
    0 never starts. With a step every 0.1 s, the run of priority 0 is ahead of every run
    enqueued more than (0 - -10 + 1) steps after it, once a pass of the aging duty
    (every AGING_PERIOD) has seen it: it starts while urgent runs are still queued, and
    within the bound docs/flow_control.md gives."""
    stop = threading.Event()

    def feed() -> None:
        n = 0
        while not stop.is_set():
            aged.options(priority=BEST).enqueue_many([(n + i,) for i in range(8)])
            n += 8
            time.sleep(0.1)

    aged.options(priority=BEST).enqueue_many([(i,) for i in range(40)])
    feeder = threading.Thread(target=feed)
    # two worker processes of one slot each: the aging duty runs in one at a time
    one = ("--concurrency", "1", "--queues", "aging")
    with WorkerProcess(dsn, APP, *one) as first, WorkerProcess(dsn, APP, *one) as second:
        first.wait_ready()
        second.wait_ready()
        feeder.start()
        try:
            time.sleep(1.0)  # a backlog of urgent runs, growing
            starved = aged.enqueue(-1)  # priority 0
            wait_until(lambda: starved.get().started_at, timeout=30, message="the starved run")
        finally:
            stop.set()
            feeder.join()
    run = starved.get()
    assert run.started_at is not None
    window = (0 - BEST + 1) * AGING + AGING_PERIOD
    with psycopg.connect(dsn) as c:
        behind = c.execute(
            "SELECT count(*) FROM pgqueue.runs WHERE queue = 'aging' AND id <> %s"
            " AND created_at <= %s AND (started_at IS NULL OR started_at > %s)",
            (run.id, run.started_at, run.started_at),
        ).fetchone()
        ahead = c.execute(
            "SELECT count(*) FROM pgqueue.runs WHERE queue = 'aging' AND id <> %s"
            " AND started_at < %s AND created_at >= %s",
            (run.id, run.started_at, run.created_at),
        ).fetchone()
    # urgent runs were still waiting when it started: aging, not an empty queue, let it in
    assert behind is not None and behind[0] > 0
    # the bound, as docs/flow_control.md computes it: the window, then the runs ahead of
    # it drained at the rate the worker drained them (measured), with a second of slack
    drained = ahead[0] if ahead else 0
    rate = 40.0 / 2  # runs a second at the least on a loaded machine (2 slots of 0.05 s)
    bound = window + drained / rate + 1.0
    waited = (run.started_at - run.created_at).total_seconds()
    assert waited <= bound, (waited, bound, drained)
    assert run.priority < 0  # it was aged (base 0)


def test_the_aging_pass_reads_the_queued_runs_by_index_not_the_history(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("""
        INSERT INTO pgqueue.queues (name, priority_aging) VALUES ('q', 1);
        INSERT INTO pgqueue.runs (task, queue, state, finished_at)
        SELECT 't', 'q', 'succeeded', now() FROM generate_series(1, 100000);
        INSERT INTO pgqueue.runs (task, queue, state, run_at)
        SELECT 't', 'q', 'queued', now() - interval '5 seconds' FROM generate_series(1, 500);
        ANALYZE pgqueue.runs;
    """)
    found = relation_scans(plan(conn, "age_priorities", {"queues": ["q"], "batch": 1000}))
    assert not [s for s in found if "Seq Scan" in s[1] and s[0] == "runs"], found
    assert ("runs", "Index Scan", "runs_claim_idx") in found or any(
        s[0] == "runs" and s[2] == "runs_claim_idx" for s in found
    ), found
    with conn.transaction():  # one now(): for both passes and the check
        conn.execute(_sql.query("age_priorities"), {"queues": ["q"], "batch": 1000})
        # exact: a step per whole second waited (5 and a bit), from base 0
        assert conn.execute(
            "SELECT DISTINCT priority + floor(extract(epoch FROM now() - run_at)), base_priority"
            " FROM pgqueue.runs WHERE state = 'queued'"
        ).fetchall() == [(0, 0)]
        # idempotent: a second pass writes nothing
        assert (
            conn.execute(_sql.query("age_priorities"), {"queues": ["q"], "batch": 1000}).rowcount
            == 0
        )


def test_the_claim_is_unchanged_by_aging(conn: psycopg.Connection[Any]) -> None:
    """claim.sql reads no aging column: the same scans of runs_claim_idx with aging on."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, priority_aging) VALUES ('q', 1);
        INSERT INTO pgqueue.runs (task, queue, state)
        SELECT 't', 'q', 'queued' FROM generate_series(1, 20000);
        ANALYZE pgqueue.runs;
    """)
    assert "aging" not in _sql.query("claim") and "base_priority" not in _sql.query("claim")
    params = {
        "queue": "q",
        "limit": 10,
        "worker_id": "00000000-0000-0000-0000-000000000001",
        "lease_seconds": 30,
        "after_priority": -32768,
        "after_id": 0,
    }
    found = relation_scans(plan(conn, "claim", params))
    assert [s[2] for s in found if s[0] == "runs" and s[1] == "Index Scan"] == [
        "runs_claim_idx"
    ] * 3, found


def test_priority_aging_is_checked_set_and_cleared(
    flow: pgqueue.App, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    with pytest.raises(pgqueue.OutOfRange, match="priority_aging must be more than 0"):
        flow.queue("bad", priority_aging=0)
    with pytest.raises(pgqueue.InvalidArguments, match="priority_aging must be seconds"):
        flow.queue("bad", priority_aging="60")  # type: ignore[arg-type]
    flow.set_priority_aging("q", 60)
    assert scalar(dsn, "SELECT priority_aging FROM pgqueue.queues WHERE name = 'q'") == 60
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, state, priority, base_priority)"
        " VALUES ('t', 'q', 'queued', -7, 3)"
    )
    flow.set_priority_aging("q", None)  # off: the waiting run gets its own priority back
    assert conn.execute("SELECT priority, base_priority FROM pgqueue.runs").fetchall() == [
        (3, None)
    ]


def test_queues_set_priority_aging_from_the_command_line(
    capsys: pytest.CaptureFixture[str], dsn: str
) -> None:
    code, out, _ = cli(capsys, "queues", "set", "q", "--priority-aging", "60", "--dsn", dsn)
    assert code == 0 and out.strip().endswith("priority_aging 60s"), out
    assert scalar(dsn, "SELECT priority_aging FROM pgqueue.queues WHERE name = 'q'") == 60
    code, out, _ = cli(capsys, "queues", "set", "q", "--concurrency", "3", "--dsn", dsn)
    assert scalar(dsn, "SELECT priority_aging FROM pgqueue.queues WHERE name = 'q'") == 60
    assert cli(capsys, "queues", "set", "q", "--priority-aging", "none", "--dsn", dsn)[0] == 0
    assert scalar(dsn, "SELECT priority_aging FROM pgqueue.queues WHERE name = 'q'") is None
    assert_user_error(
        cli(capsys, "queues", "set", "q", "--priority-aging", "soon", "--dsn", dsn),
        "--priority-aging must be seconds per step",
    )
    assert_user_error(
        cli(capsys, "queues", "set", "q", "--priority-aging", "-5", "--dsn", dsn),
        "priority_aging must be more than 0",
    )


def test_a_worker_start_stores_the_declared_aging_and_none_clears_a_set_one(
    flow: pgqueue.App, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """The queue's row follows the code at each worker start: aging declared, aging set
    at run time and then a start that declares none (the waiting runs get their base
    priority back), and a start that changes nothing leaves the row alone."""

    def start(**limits: Any) -> None:
        register(
            dsn,
            None,
            uuid.uuid4(),
            ["q"],
            1,
            declared=[QueueConfig("q", **limits)],
            tasks=[],
            version="test",
            sync_schedules=lambda c: None,
        )

    def stored() -> tuple[Any, ...]:
        row = conn.execute(
            "SELECT concurrency, priority_aging, updated_at FROM pgqueue.queues WHERE name = 'q'"
        ).fetchone()
        assert row is not None
        return tuple(row)

    start(concurrency=2, priority_aging=30.0)
    assert stored()[:2] == (2, 30.0)
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, state, priority, base_priority)"
        " VALUES ('t', 'q', 'queued', -7, 3)"
    )
    unchanged = stored()
    start(concurrency=2, priority_aging=30.0)  # nothing changed: the aged run stays aged
    assert stored() == unchanged
    assert conn.execute("SELECT priority, base_priority FROM pgqueue.runs").fetchall() == [(-7, 3)]
    flow.set_priority_aging("q", 60)
    start(concurrency=3, priority_aging=60.0)  # a limit changes, the aging is the same
    assert stored()[:2] == (3, 60.0)
    assert conn.execute("SELECT priority, base_priority FROM pgqueue.runs").fetchall() == [(-7, 3)]
    start(concurrency=3)  # declared without aging: the value set at run time goes
    assert stored()[:2] == (3, None)
    assert conn.execute("SELECT priority, base_priority FROM pgqueue.runs").fetchall() == [
        (3, None)
    ]
