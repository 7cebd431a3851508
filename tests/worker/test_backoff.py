"""Backoff of a whole group or queue: `raise pgqueue.RetryAfter(s, scope="group" |
"queue")` (docs/flow_control.md), proven with separate worker processes: after the
backoff is written, no run of the group (queue) starts before it ends, on any worker,
while other groups and queues go on; a resume lifts it."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.dashboard import data
from pgqueue.db import sql as _sql
from pgqueue.worker._completer import back_off_params, complete_params
from pgqueue.worker.records import Outcome
from tests.apps.basic import EFFECTS_DDL
from tests.apps.flow import app as flow_app
from tests.apps.flow import hit
from tests.cli.helpers import cli
from tests.helpers import WorkerProcess, scalar, scalar_conn, wait_until
from tests.sql.test_explain import plan, relation_scans
from tests.worker.test_semaphores import explain_nested, seq_scans

APP = "tests.apps.flow:app"
QUEUES = "backoffs,backoffs_capped,bystanders"
BACKOFF = 4.0  # seconds: long enough for the other groups' runs to finish inside it


@pytest.fixture
def flow(dsn: str, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute(EFFECTS_DDL)
    flow_app.configure(dsn=dsn)
    return flow_app


@pytest.fixture
def workers(dsn: str, flow: pgqueue.App) -> Any:
    """Three worker processes of 10 slots; the default 5 s poll: a worker claims again
    at a backoff's end because the claim said when, not because it polled."""
    procs = [WorkerProcess(dsn, APP, "--concurrency", "10", "--queues", QUEUES) for _ in range(3)]
    try:
        for p in procs:
            p.wait_ready()
        yield procs
    finally:
        for p in procs:
            p.stop()


def starts(dsn: str, queue: str, group: str | None) -> list[datetime]:
    """started_at of the succeeded runs of `queue` in `group` (None: any group)."""
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT started_at FROM pgqueue.runs WHERE queue = %s AND state = 'succeeded'"
            " AND (%s::text IS NULL OR group_key = %s) ORDER BY started_at",
            (queue, group, group),
        ).fetchall()
    return [r[0] for r in rows]


def done(dsn: str, queue: str, n: int) -> bool:
    count = scalar(
        dsn, "SELECT count(*) FROM pgqueue.runs WHERE queue = %s AND state = 'succeeded'", (queue,)
    )
    return bool(count >= n)


def group_until(dsn: str, queue: str, group: str) -> datetime | None:
    until: datetime | None = scalar(
        dsn,
        "SELECT until FROM pgqueue.group_backoffs WHERE queue = %s AND group_key = %s",
        (queue, group),
    )
    return until


def queue_until(dsn: str, queue: str) -> datetime | None:
    until: datetime | None = scalar(
        dsn, "SELECT backoff_until FROM pgqueue.queues WHERE name = %s", (queue,)
    )
    return until


@pytest.mark.parametrize("queue", ["backoffs", "backoffs_capped"])
def test_a_group_backoff_holds_the_group_on_every_worker_and_no_one_else(
    dsn: str, workers: Any, queue: str
) -> None:
    """Group a backs off for 4 s. Runs of group a enqueued after that start only once it
    ends (by the database's clock: started_at), and soon after it (the claim said when:
    no poll); group b's runs in the same queue, and another queue's runs, all run inside
    the backoff. The queue without limits is claimed by claim_limited() meanwhile; the
    one with a group concurrency was already."""
    trigger = hit.options(queue=queue).enqueue("a", 0, scope="group", seconds=BACKOFF)
    until = wait_until(lambda: group_until(dsn, queue, "a"), message="the group backoff")
    hit.options(queue=queue).enqueue_many([("a", i) for i in range(1, 21)])
    hit.options(queue=queue).enqueue_many([("b", i) for i in range(20)])
    hit.options(queue="bystanders").enqueue_many([("a", i) for i in range(20)])
    wait_until(lambda: done(dsn, queue, 41), timeout=30, message="every run of the queue")
    wait_until(lambda: done(dsn, "bystanders", 20), message="the other queue's runs")
    group_a = starts(dsn, queue, "a")
    assert len(group_a) == 21
    assert min(group_a) >= until, (min(group_a), until)
    # woken by the claim's answer, not by the 5 s poll
    assert (min(group_a) - until).total_seconds() < 2.0, (min(group_a), until)
    # the others were not held back: all of them ran inside the backoff
    assert max(starts(dsn, queue, "b")) < until
    assert max(starts(dsn, "bystanders", None)) < until
    # the run that raised it ran again at its end, without using an attempt
    assert trigger.get().attempt == 1


def test_a_queue_backoff_holds_the_queue_on_every_worker_and_no_other(
    dsn: str, workers: Any
) -> None:
    hit.enqueue("a", 0, scope="queue", seconds=BACKOFF)
    until = wait_until(lambda: queue_until(dsn, "backoffs"), message="the queue backoff")
    hit.enqueue_many([(g, i) for g in ("a", "b", None) for i in range(10)])
    hit.options(queue="bystanders").enqueue_many([("a", i) for i in range(20)])
    wait_until(lambda: done(dsn, "backoffs", 31), timeout=30, message="the queue's runs")
    wait_until(lambda: done(dsn, "bystanders", 20), message="the other queue's runs")
    held = starts(dsn, "backoffs", None)
    assert min(held) >= until and (min(held) - until).total_seconds() < 2.0, (held[0], until)
    assert max(starts(dsn, "bystanders", None)) < until


def test_resume_lifts_a_group_backoff_and_a_queue_backoff(
    dsn: str, workers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Backoffs of an hour: `queues resume Q --group a` lets group a's runs start at once
    (group c stays backed off); `queues resume Q` lifts the rest, the queue's own too."""
    hit.enqueue("a", 0, scope="group", seconds=3600)
    hit.enqueue("c", 0, scope="group", seconds=3600)
    wait_until(lambda: group_until(dsn, "backoffs", "a") and group_until(dsn, "backoffs", "c"))
    hit.enqueue_many([(g, i) for g in ("a", "c") for i in range(1, 6)])
    code, out, _ = cli(capsys, "queues", "resume", "backoffs", "--group", "a", "--dsn", dsn)
    assert code == 0 and "group a of queue backoffs: backoff lifted" in out, out
    wait_until(lambda: len(starts(dsn, "backoffs", "a")) == 5, message="group a's runs")
    assert starts(dsn, "backoffs", "c") == []
    code, out, _ = cli(capsys, "queues", "resume", "backoffs", "--group", "a", "--dsn", dsn)
    assert code == 0 and "group a of queue backoffs was not backed off" in out, out
    hit.enqueue("d", 0, scope="queue", seconds=3600)
    wait_until(lambda: queue_until(dsn, "backoffs"))
    code, out, _ = cli(capsys, "queues", "resume", "backoffs", "--dsn", dsn)
    assert code == 0 and "queue backoffs resumed" in out, out
    # group c's five (the raisers stay scheduled for their own due time)
    wait_until(lambda: len(starts(dsn, "backoffs", "c")) == 5, message="group c's runs")
    assert queue_until(dsn, "backoffs") is None
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.group_backoffs") == 0


def test_a_group_backoff_of_a_run_without_a_group_is_an_error(dsn: str, workers: Any) -> None:
    h = hit.options(max_attempts=1).enqueue(None, 0, scope="group", seconds=60)
    with pytest.raises(pgqueue.RunFailed) as failed:
        h.wait(timeout=20)
    assert "which has no group: give the task a group= or raise RetryAfter(scope='queue')" in (
        failed.value.run.error or ""
    )
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.group_backoffs") == 0


def _running(conn: psycopg.Connection[Any], queue: str, group: str) -> tuple[int, str]:
    token = str(uuid.uuid4())
    run_id = conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, group_key, state, attempt, lease_token,"
        " lease_expires_at, started_at) VALUES ('t', %s, %s, 'running', 1, %s,"
        " now() + interval '1 hour', now()) RETURNING id",
        (queue, group, token),
    ).fetchone()
    assert run_id is not None
    return run_id[0], token


def _retry_after(
    conn: psycopg.Connection[Any], run_id: int, token: str, s: float, scope: str
) -> None:
    """Write run `run_id`'s RetryAfter(s, scope=scope) as the completer does."""
    outcome = Outcome(run_id, token, "scheduled", delay=s, refund=True, backoff=scope)
    with conn.transaction():
        written = conn.execute(_sql.query("complete"), complete_params([outcome], uuid.uuid4()))
        ids = {row[0] for row in written.fetchall()}
        conn.execute(_sql.query("back_off"), back_off_params([outcome], ids))


def test_a_shorter_backoff_does_not_shorten_a_longer_one(conn: psycopg.Connection[Any]) -> None:
    """As a worker writes them (complete.sql, back_off.sql): a 60 s backoff, then a 1 s one of
    the same group (and queue): the 60 s stay, and the run of the shorter is due in 1 s."""
    for scope, read in [
        ("group", "SELECT until FROM pgqueue.group_backoffs WHERE group_key = 'g'"),
        ("queue", "SELECT backoff_until FROM pgqueue.queues WHERE name = 'q'"),
    ]:
        first, t1 = _running(conn, "q", "g")
        second, t2 = _running(conn, "q", "g")
        _retry_after(conn, first, t1, 60, scope)
        long = conn.execute(read).fetchone()
        _retry_after(conn, second, t2, 1, scope)
        assert conn.execute(read).fetchone() == long
        left = conn.execute(
            "SELECT extract(epoch FROM run_at - now()) FROM pgqueue.runs WHERE id = %s",
            (second,),
        ).fetchone()
        assert left is not None and left[0] < 2
        assert conn.execute(
            "SELECT attempt FROM pgqueue.runs WHERE id = ANY(%s)", ([first, second],)
        ).fetchall() == [(0,), (0,)]


def test_retry_after_refuses_an_unknown_scope() -> None:
    with pytest.raises(ValueError, match="RetryAfter scope must be 'run', 'group' or 'queue'"):
        pgqueue.RetryAfter(5, scope="cluster")
    assert pgqueue.RetryAfter(5).scope == "run"


WORKER = "00000000-0000-0000-0000-000000000001"


def test_the_claim_of_a_queue_with_group_backoffs_probes_them_by_key(
    conn: psycopg.Connection[Any],
) -> None:
    """A queue without limits and 20,000 runs of a group backed off, 1,000 groups backed
    off in all, and runs of 50 other groups: claim_limited() takes the other groups' runs
    without scanning pgqueue.runs or the backoffs (group_backoffs_pkey, one probe per
    group it meets), and flags only runs not backed off."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, group_backoff_until)
        VALUES ('q', now() + interval '1 hour');
        INSERT INTO pgqueue.group_backoffs (queue, group_key, until)
        SELECT 'q', 'held' || i, now() + interval '1 hour' FROM generate_series(1, 1000) i;
        INSERT INTO pgqueue.runs (task, queue, group_key, state)
        SELECT 't', 'q', 'held1', 'queued' FROM generate_series(1, 20000);
        INSERT INTO pgqueue.runs (task, queue, group_key, state)
        SELECT 't', 'q', 'g' || (i % 50), 'queued' FROM generate_series(1, 2000) i;
        ANALYZE pgqueue.runs; ANALYZE pgqueue.group_backoffs;
    """)
    params = {"queue": "q", "limit": 20, "worker_id": WORKER, "lease_seconds": 30, "finishing": []}
    for _ in range(6):  # past plpgsql's fifth call: its generic plans are the ones measured
        with conn.transaction(force_rollback=True):
            got = conn.execute(_sql.query("claim_limited"), params).fetchall()
            assert len(got) == 20 and all(r[10] != "held1" for r in got)
    plans = explain_nested(conn, _sql.query("claim_limited"), params)
    scanned = [p["Query Text"] for p in plans if {"runs", "group_backoffs"} & set(seq_scans(p))]
    assert not scanned, scanned
    assert "group_backoffs_pkey" in json.dumps(plans)


def test_a_weighted_queue_skips_a_group_backed_off(conn: psycopg.Connection[Any]) -> None:
    """Group weights (stride scheduling) share out the groups with room: a group backed
    off has none until its backoff ends, whatever its weight."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, concurrency, group_weights, group_backoff_until)
        VALUES ('w', 10, '{"a": 3}', now() + interval '1 hour');
        INSERT INTO pgqueue.group_backoffs (queue, group_key, until)
        VALUES ('w', 'a', now() + interval '1 hour');
        INSERT INTO pgqueue.runs (task, queue, group_key, state, limited)
        SELECT 't', 'w', (ARRAY['a', 'b'])[1 + i % 2], 'queued', true
        FROM generate_series(1, 40) i;
    """)
    params = {"queue": "w", "limit": 10, "worker_id": WORKER, "lease_seconds": 30, "finishing": []}
    got = conn.execute(_sql.query("claim_limited"), params).fetchall()
    assert len(got) == 10 and {r[10] for r in got} == {"b"}
    conn.execute("UPDATE pgqueue.group_backoffs SET until = now() - interval '1 s'")
    conn.execute("UPDATE pgqueue.queues SET group_backoff_until = NULL, concurrency = 20")
    got = conn.execute(_sql.query("claim_limited"), params).fetchall()
    assert {r[10] for r in got} == {"a", "b"}


def test_the_plain_claim_reads_a_backoff_from_the_queue_row(
    conn: psycopg.Connection[Any],
) -> None:
    """claim.sql with a queue backoff written: the same index scans (runs_claim_idx), the
    backoff one more column of the queue's row, read by its key; and it claims nothing."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, backoff_until) VALUES ('q', now() + interval '1 hour');
        INSERT INTO pgqueue.runs (task, queue, state)
        SELECT 't', 'q', 'queued' FROM generate_series(1, 20000);
        ANALYZE pgqueue.runs;
    """)
    params = {
        "queue": "q",
        "limit": 10,
        "worker_id": WORKER,
        "lease_seconds": 30,
        "after_priority": -32768,
        "after_id": 0,
    }
    found = relation_scans(plan(conn, "claim", params))
    assert {(r, index) for r, _, index in found} >= {
        ("runs", "runs_claim_idx"),
        ("queues", "queues_pkey"),
    }, found
    assert not [s for s in found if "Seq Scan" in s[1] and s[0] != "steps"], found  # empty
    with conn.transaction(force_rollback=True):
        assert conn.execute(_sql.query("claim"), params).fetchall() == []


def test_runs_show_the_dashboard_and_its_why_say_what_backs_a_run_off(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A run of a group backed off, in a queue backed off: `pgqueue runs show`, the run's
    "why" and the queue's page name both backoffs and how to lift them."""
    run_id = conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, group_key, state) VALUES ('t', 'q', 'g', 'queued')"
        " RETURNING id"
    ).fetchone()[0]  # type: ignore[index]
    other, t = _running(conn, "q", "g")
    _retry_after(conn, other, t, 600, "group")
    _retry_after(conn, *_running(conn, "q", "h"), 300, "queue")
    code, out, _ = cli(capsys, "runs", "show", str(run_id), "--dsn", dsn)
    assert code == 0
    assert "held back: queue q backed off until " in out and "(pgqueue queues resume q)" in out
    assert "held back: group g of queue q backed off until " in out, out
    assert "(pgqueue queues resume q --group g)" in out
    reasons = data.explain(conn, [run_id])[run_id]
    assert any(r.startswith("queue q backed off until ") for r in reasons), reasons
    assert any(
        r.startswith("group g of queue q backed off until ") and "--group g lifts it" in r
        for r in reasons
    ), reasons
    page = data.get_queue(conn, "q")
    assert page["backoff_until"] is not None and page["backoff_groups"] == ["g"]
    assert cli(capsys, "queues", "resume", "q", "--dsn", dsn)[0] == 0
    code, out, _ = cli(capsys, "runs", "show", str(run_id), "--dsn", dsn)
    assert "held back" not in out
    assert not [r for r in data.explain(conn, [run_id])[run_id] if "backed off" in r]


def test_a_backoff_says_when_to_claim_again(conn: psycopg.Connection[Any]) -> None:
    """rate_open_at.sql: the first end among the queue's backoff and its groups'."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, backoff_until, group_backoff_until)
        VALUES ('q', clock_timestamp() + interval '9 s', clock_timestamp() + interval '8 s');
        INSERT INTO pgqueue.group_backoffs (queue, group_key, until)
        VALUES ('q', 'a', clock_timestamp() + interval '8 s'),
               ('q', 'b', clock_timestamp() + interval '3 s'),
               ('q', 'c', clock_timestamp() - interval '1 s');
    """)
    assert 2.5 < scalar_conn(conn, _sql.query("rate_open_at"), {"queue": "q"}) <= 3
    conn.execute("DELETE FROM pgqueue.group_backoffs WHERE group_key <> 'c'")
    assert 8.5 < scalar_conn(conn, _sql.query("rate_open_at"), {"queue": "q"}) <= 9
    conn.execute("UPDATE pgqueue.queues SET backoff_until = NULL, group_backoff_until = NULL")
    assert conn.execute(_sql.query("rate_open_at"), {"queue": "q"}).fetchall() == []


def test_the_dashboards_queue_page_shows_the_backoffs_and_the_aging(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    pytest.importorskip("starlette")  # the dashboard's extra
    from tests.dashboard.test_routes import client

    _retry_after(conn, *_running(conn, "q", "g"), 600, "group")
    _retry_after(conn, *_running(conn, "q", "h"), 300, "queue")
    conn.execute("UPDATE pgqueue.queues SET priority_aging = 60 WHERE name = 'q'")
    with client(dsn) as web:
        page = web.get("/queues/q").text
    assert 'id="backoff"' in page and "backed off until (RetryAfter)" in page
    assert 'id="group-backoffs"' in page and "g until " in page
    assert "Resume queue" in page
    assert 'id="aging"' in page and "priority aging, per step" in page
