"""Cluster-wide limits and fairness, proven with separate worker processes."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import sql as _sql
from tests.apps.basic import EFFECTS_DDL
from tests.apps.limits import app as limits_app
from tests.apps.limits import overrun, overrun_hooked, span, stubborn
from tests.helpers import WorkerProcess, scalar, scalar_conn, wait_until

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


WORKER = "00000000-0000-0000-0000-000000000001"


def claim_limited(
    conn: psycopg.Connection[Any], limit: int, finishing: list[str] | None = None
) -> list[tuple[str, str]]:
    """(group_key, task) of the runs one limited claim of queue q takes, sorted."""
    params = {
        "queue": "q",
        "limit": limit,
        "worker_id": WORKER,
        "lease_seconds": 30,
        "finishing": finishing or [],
    }
    rows = conn.execute(_sql.query("claim_limited"), params).fetchall()
    return sorted((r[10], r[1]) for r in rows)


def explain_nested(conn: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> list[Any]:
    """EXPLAIN ANALYZE plans of every statement `query` runs, nested ones included
    (auto_explain at NOTICE level), in a rolled-back transaction; the last is `query`."""
    with conn.transaction(force_rollback=True):
        conn.execute(query, params)  # warm up: compile the function, fill catalog caches
    plans: list[Any] = []
    conn.add_notice_handler(
        lambda d: (
            plans.append(json.loads(d.message_primary.split("\n", 1)[1]))
            if d.message_primary and d.message_primary.startswith("duration:")
            else None
        )
    )
    with conn.transaction(force_rollback=True):
        conn.execute("LOAD 'auto_explain'")
        for setting, value in [
            ("log_min_duration", "0"),
            ("log_nested_statements", "on"),
            ("log_analyze", "on"),
            ("log_buffers", "on"),
            ("log_format", "json"),
            ("log_level", "notice"),
        ]:
            conn.execute(f"SET LOCAL auto_explain.{setting} = '{value}'")
        conn.execute(query, params)
    return plans


def test_limited_claim_does_not_read_a_full_groups_backlog(conn: psycopg.Connection[Any]) -> None:
    conn.execute("""
        INSERT INTO pgqueue.queues (name, group_concurrency) VALUES ('q', 1);
        INSERT INTO pgqueue.runs (task, queue, group_key, state, limited)
        SELECT 't', 'q', 'big', 'queued', true FROM generate_series(1, 100000);
        INSERT INTO pgqueue.runs (task, queue, group_key, state, lease_token, lease_expires_at,
                                  limited)
        VALUES ('t', 'q', 'big', 'running', gen_random_uuid(), now() + interval '1 hour', true);
        INSERT INTO pgqueue.runs (task, queue, group_key, state, limited)
        VALUES ('t', 'q', 'small', 'queued', true);
        ANALYZE pgqueue.runs;
    """)
    params = {
        "queue": "q",
        "limit": 10,
        "worker_id": WORKER,
        "lease_seconds": 30,
        "finishing": [],
    }
    plans = explain_nested(conn, _sql.query("claim_limited"), params)
    # the outer statement and, nested in it, the function's statements
    assert len(plans) >= 5, plans
    text = json.dumps(plans)
    assert not [n for n in seq_scans(plans) if n == "runs"], "the claim scanned pgqueue.runs"
    assert "runs_group_claim_idx" in text
    outer = plans[-1]["Plan"]
    touched = outer.get("Shared Hit Blocks", 0) + outer.get("Shared Read Blocks", 0)
    assert touched < 200, f"claim touched {touched} blocks: it read the backlog"
    assert [g for g, _ in claim_limited(conn, 10)] == ["small"]


def test_limited_claim_cost_does_not_grow_with_groups(conn: psycopg.Connection[Any]) -> None:
    """1,000 groups with room, 10 permits: the claim visits about 10 groups, not 1,000."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, group_concurrency) VALUES ('q', 1);
        INSERT INTO pgqueue.runs (task, queue, group_key, state, limited)
        SELECT 't', 'q', 'g' || lpad((i % 1000)::text, 4, '0'), 'queued', true
        FROM generate_series(1, 20000) i;
        ANALYZE pgqueue.runs;
    """)
    plans = explain_nested(
        conn,
        _sql.query("claim_limited"),
        {"queue": "q", "limit": 10, "worker_id": WORKER, "lease_seconds": 30, "finishing": []},
    )
    outer = plans[-1]["Plan"]
    touched = outer.get("Shared Hit Blocks", 0) + outer.get("Shared Read Blocks", 0)
    assert touched < 400, f"claim touched {touched} blocks for 10 runs"
    probes = [p for p in plans if "runs_group_claim_idx" in json.dumps(p)]
    assert len(probes) < 60, f"{len(probes)} index probes for 10 runs"


def test_limited_claim_order_priority_turns_fifo(conn: psycopg.Connection[Any]) -> None:
    conn.execute("""
        INSERT INTO pgqueue.queues (name, concurrency) VALUES ('q', 100);
        INSERT INTO pgqueue.runs (task, queue, group_key, state, priority, limited)
        VALUES ('a1', 'q', 'a', 'queued', 0, true), ('a2', 'q', 'a', 'queued', 0, true),
               ('a3', 'q', 'a', 'queued', 0, true), ('b1', 'q', 'b', 'queued', 0, true),
               ('b2', 'q', 'b', 'queued', 0, true), ('c1', 'q', 'c', 'queued', 0, true),
               ('d1', 'q', 'd', 'queued', -5, true), ('d2', 'q', 'd', 'queued', 5, true);
    """)
    # priority -5 first; then one run per group in turn (a, b, c), then a's second
    assert claim_limited(conn, 5) == [
        ("a", "a1"),
        ("a", "a2"),
        ("b", "b1"),
        ("c", "c1"),
        ("d", "d1"),
    ]
    # the cursor is at c: the next turn starts after it (d's priority-5 run waits for the
    # priority-0 runs), wrapping around to a
    assert claim_limited(conn, 2) == [("a", "a3"), ("b", "b2")]
    assert claim_limited(conn, 5) == [("d", "d2")]
    assert scalar_conn(conn, "SELECT rr_cursor FROM pgqueue.queues WHERE name = 'q'") == "d"


def test_limited_claim_counts_permits_exactly(conn: psycopg.Connection[Any]) -> None:
    conn.execute("""
        INSERT INTO pgqueue.queues (name, concurrency, group_concurrency) VALUES ('q', 3, 2);
        INSERT INTO pgqueue.runs (task, queue, group_key, state, limited)
        SELECT 't', 'q', g, 'queued', true FROM unnest(ARRAY['a', 'a', 'a', 'b', 'b']) g;
    """)
    first = claim_limited(conn, 10)
    assert [g for g, _ in first] == ["a", "a", "b"]  # queue limit 3, group limit 2
    assert claim_limited(conn, 10) == []
    token = scalar_conn(
        conn,
        "SELECT lease_token::text FROM pgqueue.runs"
        " WHERE state = 'running' AND group_key = 'a' LIMIT 1",
    )
    # a run whose outcome is being written gives its permit to its own worker's claim
    # (the cursor is at b, so a's turn comes first)
    assert [g for g, _ in claim_limited(conn, 10, finishing=[token])] == ["a"]
    # an expired lease holds no permit
    conn.execute("UPDATE pgqueue.runs SET lease_expires_at = now() WHERE group_key = 'a'")
    assert [g for g, _ in claim_limited(conn, 10)] == ["b"]
    conn.execute("UPDATE pgqueue.queues SET paused = true WHERE name = 'q'")
    conn.execute("UPDATE pgqueue.runs SET lease_expires_at = now()")
    assert claim_limited(conn, 10) == []


# -- the `limited` flag: runs_group_claim_idx holds only the runs of queues with limits ------


def flags(conn: psycopg.Connection[Any]) -> dict[str, list[bool]]:
    rows = conn.execute("SELECT task, limited FROM pgqueue.runs ORDER BY id").fetchall()
    out: dict[str, list[bool]] = {}
    for task, limited in rows:
        out.setdefault(task, []).append(limited)
    return out


def group_index_pages(conn: psycopg.Connection[Any]) -> int:
    size = scalar_conn(conn, "SELECT pg_relation_size('pgqueue.runs_group_claim_idx')")
    return int(size) // 8192


def test_runs_are_flagged_by_their_queues_limits(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """Every way in flags a run `limited` exactly when its queue has limits; runs of
    queues without limits never enter runs_group_claim_idx."""
    app.set_limits("tight", concurrency=2, group_concurrency=None)

    @app.task(queue="tight")
    def held(n: int) -> None: ...

    @app.task(queue="free")
    def loose(n: int) -> None: ...

    empty = group_index_pages(conn)
    loose.enqueue_many([(i,) for i in range(500)])
    loose.enqueue(1)
    loose.options(idempotency_key="k1").enqueue(2)
    loose.enqueue_many([(3,)])
    conn.execute("SELECT pgqueue.enqueue('sql_free', queue => 'free')")
    assert group_index_pages(conn) == empty  # nothing entered the index
    held.enqueue_many([(i,) for i in range(3)])
    held.enqueue(9)
    held.options(idempotency_key="k2").enqueue(10)
    held.options(delay=3600).enqueue(11)  # scheduled: flagged too, for when it is due
    conn.execute("SELECT pgqueue.enqueue('sql_tight', queue => 'tight')")
    found = flags(conn)
    assert set(found[loose.name]) == {False} and len(found[loose.name]) == 503
    assert found["sql_free"] == [False]
    assert found[held.name] == [True] * 6
    assert found["sql_tight"] == [True]
    assert group_index_pages(conn) > empty


def test_limits_that_come_or_go_reflag_unfinished_runs(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    @app.task(queue="later")
    def job(n: int) -> None: ...

    job.enqueue_many([(i,) for i in range(3)])
    job.options(delay=3600).enqueue(3)
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, state, finished_at)"
        " VALUES ('done', 'later', 'succeeded', now())"
    )
    assert flags(conn) == {job.name: [False] * 4, "done": [False]}
    app.set_limits("later", concurrency=None, group_concurrency=1)
    assert flags(conn) == {job.name: [True] * 4, "done": [False]}  # history untouched
    app.set_limits("later", concurrency=5, group_concurrency=1)  # still limited
    assert flags(conn) == {job.name: [True] * 4, "done": [False]}
    app.set_limits("later", concurrency=None, group_concurrency=None)  # none left
    assert flags(conn) == {job.name: [False] * 4, "done": [False]}


def test_limits_change_while_runs_is_locked_reflags_without_waiting(
    app: pgqueue.App, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A long transaction holding runs keeps the trigger's lock from it: after its lock
    timeout it re-flags what is committed, instead of stalling every writer."""

    @app.task(queue="busy")
    def job(n: int) -> None: ...

    job.enqueue_many([(i,) for i in range(3)])
    with psycopg.connect(dsn) as long_tx:
        long_tx.execute("UPDATE pgqueue.runs SET priority = priority WHERE false")  # a lock
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute(
            "INSERT INTO pgqueue.queues (name, concurrency) VALUES ('busy', 1)"
            " ON CONFLICT (name) DO UPDATE SET concurrency = 1"
        )
        long_tx.rollback()
    assert any("re-flagged without the lock" in n for n in notices), notices
    assert flags(conn) == {job.name: [True] * 3}


def test_unflagged_runs_of_a_limited_queue_are_taken_in(conn: psycopg.Connection[Any]) -> None:
    """A run filed without the flag (a REPEATABLE READ enqueue that raced a limit change,
    a producer on older code) is claimed: at the latest when no flagged run is left, and
    before that once a claim finds it at the front of its queue (one claim in twenty
    looks)."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, concurrency) VALUES ('q', 1000);
        INSERT INTO pgqueue.runs (task, queue, state, limited) VALUES ('old', 'q', 'queued', false);
        INSERT INTO pgqueue.runs (task, queue, state, limited)
        SELECT 'new', 'q', 'queued', true FROM generate_series(1, 300);
    """)
    order = [task for _ in range(301) for _, task in claim_limited(conn, 1)]
    assert len(order) == 301
    assert order.index("old") < 300  # taken in from the front, not only at the end
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, state, limited)"
        " VALUES ('late', 'q', 'queued', false)"
    )
    assert claim_limited(conn, 5) == [("", "late")]  # no flagged run left: taken in


def test_two_limit_changes_at_once_take_turns(app: pgqueue.App, dsn: str) -> None:
    """Two queues gaining limits in concurrent transactions: the second waits for the
    first, then both queues' runs are re-flagged, and neither fails."""

    @app.task(queue="qa")
    def a(n: int) -> None: ...

    @app.task(queue="qb")
    def b(n: int) -> None: ...

    a.enqueue_many([(i,) for i in range(3)])
    b.enqueue_many([(i,) for i in range(3)])
    with psycopg.connect(dsn) as first:
        first.execute("INSERT INTO pgqueue.queues (name, concurrency) VALUES ('qa', 1)")
        done = threading.Event()

        def second() -> None:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("INSERT INTO pgqueue.queues (name, concurrency) VALUES ('qb', 1)")
            done.set()

        thread = threading.Thread(target=second)
        thread.start()
        assert not done.wait(1.0)  # held back by the first change
        first.commit()
        thread.join(10)
    assert done.is_set()
    with psycopg.connect(dsn) as c:
        rows = c.execute("SELECT DISTINCT queue, limited FROM pgqueue.runs ORDER BY 1").fetchall()
    assert rows == [("qa", True), ("qb", True)]


# -- the claim hint: a limited claim continues after the last one (migration 0007) ---------


def claim_blocks(conn: psycopg.Connection[Any], limit: int) -> tuple[int, list[Any], list[int]]:
    """Blocks one limited claim of queue q touches, its nested plans and the ids it takes
    (rolled back: the database is as before)."""
    params = {
        "queue": "q",
        "limit": limit,
        "worker_id": WORKER,
        "lease_seconds": 30,
        "finishing": [],
    }
    for _ in range(6):  # past plpgsql's fifth call: its generic plans are the ones measured
        with conn.transaction(force_rollback=True):
            conn.execute(_sql.query("claim_limited"), params)
    plans = explain_nested(conn, _sql.query("claim_limited"), params)
    with conn.transaction(force_rollback=True):
        ids = sorted(r[0] for r in conn.execute(_sql.query("claim_limited"), params))
    outer = plans[-1]["Plan"]
    return outer.get("Shared Hit Blocks", 0) + outer.get("Shared Read Blocks", 0), plans, ids


def test_limited_claim_starts_after_the_hint(conn: psycopg.Connection[Any]) -> None:
    """30,000 runs of the queue left `queued` since the last vacuum: a claim from the front
    reads their dead entries in runs_group_claim_idx; one from the hint steps over them."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, concurrency) VALUES ('q', 1000000);
        INSERT INTO pgqueue.runs (task, queue, state, limited)
        SELECT 't', 'q', 'queued', true FROM generate_series(1, 30200);
        ANALYZE pgqueue.runs;
        UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now()
         WHERE id <= (SELECT min(id) + 29999 FROM pgqueue.runs);
    """)
    first = int(scalar_conn(conn, "SELECT min(id) FROM pgqueue.runs WHERE state = 'queued'"))
    conn.execute("UPDATE pgqueue.queues SET hint_since = NULL")
    stale, _, stale_ids = claim_blocks(conn, 50)
    conn.execute(
        "UPDATE pgqueue.queues SET hint_priority = 0, hint_group = '', hint_id = %s,"
        " hint_since = clock_timestamp() + interval '1 hour'",  # fresh for the whole test
        (first - 1,),
    )
    hinted, plans, hinted_ids = claim_blocks(conn, 50)
    assert stale_ids == hinted_ids == list(range(first, first + 50))
    assert not [n for n in seq_scans(plans) if n == "runs"], "the claim scanned pgqueue.runs"
    assert "runs_group_claim_idx" in json.dumps(plans)
    assert hinted * 3 < stale, f"from the hint: {hinted} blocks; from the front: {stale}"


def test_a_run_behind_the_hint_waits_for_a_claim_from_the_front(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("""
        INSERT INTO pgqueue.queues (name, concurrency) VALUES ('q', 100);
        INSERT INTO pgqueue.runs (task, queue, state, limited)
        SELECT 'r' || i, 'q', 'queued', true FROM generate_series(1, 7) i;
    """)
    assert claim_limited(conn, 3) == [("", "r1"), ("", "r2"), ("", "r3")]
    hint = conn.execute(
        "SELECT q.hint_priority, q.hint_group, r.task FROM pgqueue.queues q"
        " JOIN pgqueue.runs r ON r.id = q.hint_id"
    ).fetchone()
    assert hint == (0, "", "r3")

    def back(task: str) -> None:
        """The run comes back to the queue, as a retry or a rescue would bring it."""
        conn.execute(
            "UPDATE pgqueue.runs SET state = 'queued', lease_token = NULL,"
            " lease_expires_at = NULL, worker_id = NULL WHERE task = %s",
            (task,),
        )

    def fresh_hint() -> None:  # for the whole test, not 0.1 s
        conn.execute("UPDATE pgqueue.queues SET hint_since = clock_timestamp() + interval '1 h'")

    back("r1")
    fresh_hint()
    # enough runs after the hint: r1 waits
    assert claim_limited(conn, 1) == [("", "r4")]
    # fewer after the hint (r5 to r7) than the claim may take: it reads from the front
    assert claim_limited(conn, 5) == [("", "r1"), ("", "r5"), ("", "r6"), ("", "r7")]
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, state, limited)"
        " VALUES ('r8', 'q', 'queued', true), ('r9', 'q', 'queued', true)"
    )
    back("r2")
    fresh_hint()
    assert claim_limited(conn, 1) == [("", "r8")]
    # the hint's time is up (0.1 s in production): the next claim reads from the front
    conn.execute("UPDATE pgqueue.queues SET hint_since = clock_timestamp() - interval '1 h'")
    assert claim_limited(conn, 1) == [("", "r2")]
    assert claim_limited(conn, 5) == [("", "r9")]


# -- a timed-out sync attempt keeps its permit until its thread returns ---------------------


def test_timed_out_sync_bodies_never_exceed_the_limit(dsn: str, limits: pgqueue.App) -> None:
    """Timeout 1 s, bodies of 3 s, limit 3, two workers of 5 slots: each timeout writes the
    attempt's failure at once, but no fourth body starts before a thread has returned.
    Half the runs have a hook (their attempt is awaited on the loop), half have none."""
    runs = overrun.enqueue_many([(f"z{i}", 3) for i in range(4)])
    runs += overrun_hooked.enqueue_many([(f"z{i}", 3) for i in range(4, 8)])
    procs = workers(dsn, 2, "--concurrency", "5", "--queues", "overrun")
    try:
        for p in procs:
            p.wait_ready()
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM effects WHERE tag LIKE 'end:%%'") == 8,
            timeout=60,
            message="8 bodies to return",
        )
        assert max_overlap(dsn) == 3
        # every permit came back once its thread returned
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.zombie_permits") == 0,
            message="the threads' permits to come back",
        )
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM effects WHERE tag LIKE 'hook:%%'") == 4,
            message="the on_failure hooks",
        )
    finally:
        stop_all(procs)
    # the outcome was written when the timeout fired, not when the body returned
    assert {limits.get_run(h.id).state for h in runs} == {"failed"}
    failed_early = scalar(
        dsn,
        """SELECT count(*) FROM pgqueue.runs r
            JOIN effects e ON e.tag = 'end:' || (r.args ->> 0)
           WHERE r.finished_at < e.at""",
    )
    assert failed_early == 8


def test_a_canceled_sync_body_keeps_its_permit_until_it_returns(
    dsn: str, limits: pgqueue.App
) -> None:
    """A queue limited to one, two workers: the running run is canceled while its sync body
    (which ignores ctx.cancelled) runs on for 3 s. No other body starts before it returns,
    however soon the other worker claims after the cancel; the next starts once it has.
    (pgqueue.cancel() files the permit; a worker that filed it only on hearing of the
    cancel lost the race to the other worker's claim.)"""
    first = stubborn.enqueue("c0", 3)
    stubborn.enqueue_many([("c1", 0.1), ("c2", 0.1)])
    procs = workers(dsn, 2, "--concurrency", "2", "--queues", "stubborn")
    try:
        for p in procs:
            p.wait_ready()
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM effects WHERE tag = 'start:c0'") == 1,
            message="the first body to start",
        )
        # the other worker is woken in the cancel's own transaction: it claims at once,
        # before the canceled attempt's worker has even heard of the cancel
        with psycopg.connect(dsn) as c:
            assert c.execute("SELECT pgqueue.cancel(%s)", (first.id,)).fetchone() == (True,)
            c.execute("SELECT pg_notify('pgqueue_queued', 'stubborn')")
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM effects WHERE tag LIKE 'end:%%'") == 3,
            timeout=30,
            message="3 bodies to return",
        )
        assert max_overlap(dsn) == 1
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.zombie_permits") == 0,
            message="the canceled attempt's permit to come back",
        )
    finally:
        stop_all(procs)
    assert limits.get_run(first.id).state == "canceled"
    # the permit came back when the body returned, not a lease renewal later
    gap = scalar(
        dsn,
        """SELECT extract(epoch FROM min(s.at) - (SELECT at FROM effects WHERE tag = 'end:c0'))
             FROM effects s WHERE s.tag IN ('start:c1', 'start:c2')""",
    )
    assert 0 <= gap < 5, gap


def test_a_threads_permit_counts_while_its_worker_beats(conn: psycopg.Connection[Any]) -> None:
    conn.execute("""
        INSERT INTO pgqueue.queues (name, concurrency, group_concurrency) VALUES ('q', 2, 1);
        INSERT INTO pgqueue.runs (task, queue, group_key, state, limited)
        SELECT 't', 'q', g, 'queued', true FROM unnest(ARRAY['a', 'a', 'b', 'c']) g;
        INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version)
        VALUES ('00000000-0000-0000-0000-000000000002', 'h', 1, '{q}', 1, 'x');
        INSERT INTO pgqueue.zombie_permits
            (lease_token, run_id, worker_id, queue, group_key, lease_seconds)
        VALUES (gen_random_uuid(), 0, '00000000-0000-0000-0000-000000000002', 'q', 'a', 5);
    """)
    # the thread holds one of the queue's two permits, and group a's only one
    assert claim_limited(conn, 10) == [("b", "t")]
    conn.execute("UPDATE pgqueue.runs SET lease_expires_at = now() WHERE state = 'running'")
    # its worker stopped beating a lease ago (killed): the thread died with it
    conn.execute("UPDATE pgqueue.workers SET heartbeat_at = now() - interval '6 s'")
    assert claim_limited(conn, 10) == [("a", "t"), ("c", "t")]
    # the worker's row goes (deregistered or pruned), and its threads' permits with it
    conn.execute("DELETE FROM pgqueue.workers")
    assert scalar_conn(conn, "SELECT count(*) FROM pgqueue.zombie_permits") == 0


def test_a_canceled_running_attempt_keeps_its_permit_while_its_worker_beats(
    conn: psycopg.Connection[Any],
) -> None:
    """pgqueue.cancel() of a running run of a limited queue files its attempt's permit in
    the same statement: no claim, however soon after the cancel, starts another body while
    that attempt's code may still run (its worker stops it, or sees its thread return,
    only later). A run whose lease had already expired holds nothing."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, concurrency, group_concurrency) VALUES ('q', 2, 1);
        INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version)
        VALUES ('00000000-0000-0000-0000-000000000002', 'h', 1, '{q}', 1, 'x');
        INSERT INTO pgqueue.runs (task, queue, group_key, state, limited)
        SELECT 't', 'q', g, 'queued', true FROM unnest(ARRAY['a', 'a', 'b', 'c']) g;
    """)
    assert claim_limited(conn, 1) == [("a", "t")]
    running = scalar_conn(conn, "SELECT id FROM pgqueue.runs WHERE state = 'running'")
    # the attempt is another worker's (a live one), as a claim by that worker would leave it
    conn.execute(
        "UPDATE pgqueue.runs SET worker_id = '00000000-0000-0000-0000-000000000002' WHERE id = %s",
        (running,),
    )
    assert scalar_conn(conn, "SELECT pgqueue.cancel(%s)", [running]) is True
    held = conn.execute(
        "SELECT run_id, group_key, lease_seconds > 20 FROM pgqueue.zombie_permits"
    ).fetchall()
    assert held == [(running, "a", True)]
    # group a's only permit is the canceled attempt's; the queue has one more
    assert claim_limited(conn, 10) == [("b", "t")]
    # its worker saw the code end: the permit comes back
    conn.execute("DELETE FROM pgqueue.zombie_permits")
    conn.execute("UPDATE pgqueue.runs SET lease_expires_at = now() WHERE state = 'running'")
    assert claim_limited(conn, 10) == [("a", "t"), ("c", "t")]
    # a cancel of an attempt whose lease had expired (its worker is gone) files nothing
    conn.execute("UPDATE pgqueue.runs SET lease_expires_at = now() WHERE state = 'running'")
    for (run_id,) in conn.execute("SELECT id FROM pgqueue.runs WHERE state = 'running'"):
        assert scalar_conn(conn, "SELECT pgqueue.cancel(%s)", [run_id]) is True
    assert scalar_conn(conn, "SELECT count(*) FROM pgqueue.zombie_permits") == 0
