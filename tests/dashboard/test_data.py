"""Every query the dashboard runs reads an index, never the whole runs table, under the
generic plans a prepared statement gets, with a large history around it."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgqueue.dashboard import data
from pgqueue.db import sql as _sql
from pgqueue.ops import bulk as _bulk
from tests.helpers import plan_nodes


@pytest.fixture
def big(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """200,000 finished runs (1% failed), 50,000 queued runs of two queues (one limited),
    20,000 scheduled, 2,000 running and 500 waiting runs."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, group_concurrency) VALUES ('crawl', 2);
        INSERT INTO pgqueue.runs (task, queue, state, finished_at, parent_id)
        SELECT 't', 'default', CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'succeeded' END,
               now() - i * interval '1 s', CASE WHEN i % 10 = 0 THEN i END
        FROM generate_series(1, 200000) i;
        INSERT INTO pgqueue.runs (task, queue, group_key, limited)
        SELECT 't', CASE WHEN i % 2 = 0 THEN 'crawl' ELSE 'default' END, 'g' || (i % 100),
               i % 2 = 0
        FROM generate_series(1, 50000) i;
        INSERT INTO pgqueue.runs (task, queue, state, run_at)
        SELECT 't', 'default', 'scheduled', now() + interval '1 day'
        FROM generate_series(1, 20000);
        INSERT INTO pgqueue.runs (task, queue, state, lease_token, lease_expires_at)
        SELECT 't', 'crawl', 'running', gen_random_uuid(), now() + interval '1 hour'
        FROM generate_series(1, 2000);
        INSERT INTO pgqueue.runs (task, queue, state, wait_event, wait_key, run_at)
        SELECT 't', 'default', 'waiting', 'e', i::text, now() + interval '1 hour'
        FROM generate_series(1, 500) i;
        ANALYZE pgqueue.runs;
    """)
    return conn


def plan(conn: psycopg.Connection[Any], query: sql.Composable | str, params: Any) -> Any:
    text = sql.SQL(query) if isinstance(query, str) else query  # type: ignore[arg-type]
    with conn.transaction():
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        row = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) ") + text, params).fetchone()
    assert row is not None
    return row[0]


def reads(node: Any) -> tuple[set[str], list[str]]:
    """The indexes a plan reads, and the runs-table scans it makes without one."""
    nodes = plan_nodes(node)
    indexes = {n["Index Name"] for n in nodes if n.get("Index Name")}
    full = [
        json.dumps({k: v for k, v in n.items() if k != "Plans"})
        for n in nodes
        if n.get("Node Type") == "Seq Scan" and n.get("Relation Name") == "runs"
    ]
    return indexes, full


def assert_reads(
    conn: psycopg.Connection[Any], query: sql.Composable | str, params: Any, *expected: str
) -> None:
    indexes, full = reads(plan(conn, query, params))
    assert not full, full
    missing = set(expected) - indexes
    if missing <= LIVE and "runs_live_task_idx" in indexes:
        # PostgreSQL 18 may skip-scan the (task, state, id) index of unfinished runs for a
        # live state instead of that state's own index: it holds no history either
        missing = set()
    assert not missing, (missing, indexes)


# The partial indexes of one live state each.
LIVE = {
    "runs_claim_idx",
    "runs_group_claim_idx",
    "runs_lease_idx",
    "runs_scheduled_idx",
    "runs_wait_deadline_idx",
    "runs_wait_event_idx",
}


FILTERS = {
    "state": None,
    "queue": None,
    "task": None,
    "group": None,
    "q": None,
    "arg": None,
    "error_class": None,
    "limit": 50,
    "scan": 2000,
}
START = {"before_id": 2**63 - 1, "before_at": data.END}


def test_dashboard_queries_use_their_indexes(big: psycopg.Connection[Any]) -> None:
    # One test, one large fixture: building it per query would slow the suite.
    conn = big
    page = {**FILTERS, **START}
    expected = {
        None: "runs_pkey",
        "queued": "runs_claim_idx",
        "scheduled": "runs_scheduled_idx",
        "running": "runs_lease_idx",
        "succeeded": "runs_finished_queue_idx",
        "canceled": "runs_finished_queue_idx",
        "failed": "runs_failed_idx",
    }
    for state, index in expected.items():
        query, _ = data.runs_query(data.RunFilter(state=state))
        assert_reads(conn, query, page, index)
    query, _ = data.runs_query(data.RunFilter(state="waiting"))
    assert_reads(conn, query, page)

    assert_reads(
        conn,
        _sql.query("dashboard_queues"),
        {},
        "runs_claim_idx",
        "runs_scheduled_idx",
        "runs_lease_idx",
        "runs_finished_queue_idx",
    )
    assert_reads(
        conn,
        _sql.query("dashboard_queue"),
        {"queue": "crawl"},
        "runs_finished_queue_idx",
    )
    assert_reads(conn, _sql.query("dashboard_throughput"), {}, "runs_finished_queue_idx")
    assert_reads(
        conn,
        _sql.query("dashboard_groups"),
        {"queue": "crawl", "limit": 100},
        "runs_lease_idx",
        "runs_scheduled_idx",
    )
    assert_reads(
        conn, _sql.query("dashboard_why"), {"ids": [1, 2, 3]}, "runs_pkey", "runs_lease_idx"
    )
    assert_reads(conn, _sql.query("dashboard_run"), {"id": 1}, "runs_pkey")
    assert_reads(
        conn, _sql.query("dashboard_run_children"), {"id": 10, "limit": 200}, "runs_parent_idx"
    )
    assert_reads(conn, _sql.query("run_errors"), {"id": 1})
    assert_reads(conn, _sql.query("list_schedules"), {})
    assert_reads(conn, _sql.query("workers_live"), {})
    filt = {
        "queue": "default",
        "task": None,
        "group": None,
        "older_than": None,
        "reason": None,
        "error_class": None,
    }
    batch = {
        "upto": 2**62,
        "upto_at": "2100-01-01T00:00:00Z",
        "after_at": "1970-01-01T00:00:00Z",
        "after_id": 0,
    }
    for action, state, index in (
        ("retry", "failed", "runs_failed_idx"),
        ("cancel", "queued", "runs_claim_idx"),
    ):
        query = _bulk.with_states("bulk_count", (state,))
        assert_reads(conn, query, filt, index)
        if action == "retry":
            query = _bulk.retry_query((state,), 1000)
        else:
            query = _bulk.cancel_query(state, 1000)
        assert_reads(conn, query, filt | batch, index)
    # every live state's cancel reads a partial index of that state only (no sequential
    # scan through history), with or without a queue; PostgreSQL 18 may instead skip-scan
    # the (task, state, id) index of unfinished runs, which holds no history either
    for state, indexes in (
        ("waiting", {"runs_wait_deadline_idx", "runs_wait_event_idx"}),
        ("scheduled", {"runs_scheduled_idx"}),
        ("running", {"runs_lease_idx"}),
        ("queued", {"runs_claim_idx", "runs_group_claim_idx"}),
    ):
        for queue in ("default", None):
            query = _bulk.cancel_query(state, 1000)
            read, full = reads(plan(conn, query, filt | batch | {"queue": queue}))
            indexes = indexes | {"runs_live_task_idx"}
            assert not full and read & indexes and read <= indexes, (state, queue, read)


def test_batch_pages_read_the_batches_and_their_members_through_indexes(
    conn: psycopg.Connection[Any],
) -> None:
    """5,000 batches, 40,000 members of them and 40,000 runs outside any batch."""
    conn.execute("""
        INSERT INTO pgqueue.batch_heads (on_complete, queue, total, sealed_at)
        SELECT 't', 'default', 8, now() FROM generate_series(1, 5000);
        INSERT INTO pgqueue.batch_counts (batch_id, slot, succeeded)
        SELECT id, s, 1 FROM pgqueue.batch_heads, generate_series(0, 3) s;
        INSERT INTO pgqueue.runs (task, queue, state, finished_at, batch_id)
        SELECT 't', 'default', 'succeeded', now(), CASE WHEN i % 2 = 0 THEN 1 + i % 5000 END
        FROM generate_series(1, 80000) i;
        ANALYZE pgqueue.runs;
        ANALYZE pgqueue.batch_heads;
        ANALYZE pgqueue.batch_counts;
    """)

    def batch_scans(query: str, params: dict[str, Any]) -> set[str]:
        node = plan(conn, query, params)
        indexes, full = reads(node)
        assert not full and '"Seq Scan"' not in json.dumps(node), node
        return indexes

    listed = batch_scans(_sql.query("dashboard_batches"), {"before_id": 2**62, "limit": 50})
    assert {"batches_pkey", "batch_counts_pkey"} <= listed, listed
    one = batch_scans(_sql.query("dashboard_batch"), {"id": 7})
    assert {"batches_pkey", "batch_counts_pkey"} <= one, one
    members = {"id": 7, "after_id": 0, "limit": 50}
    assert "runs_batch_idx" in batch_scans(_sql.query("dashboard_batch_members"), members)


def rows_read(conn: psycopg.Connection[Any], query: sql.Composable | str, params: Any) -> Any:
    """Index entries each index of the runs table gave, by EXPLAIN ANALYZE (under a
    generic plan): what a query really reads, not just which index."""
    text = sql.SQL(query) if isinstance(query, str) else query  # type: ignore[arg-type]
    with conn.transaction():
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        row = conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + text, params).fetchone()
    assert row is not None
    read: dict[str, int] = {}
    for n in plan_nodes(row[0]):
        # index scans name the table, bitmap index scans only the index
        if str(n.get("Index Name", "")).startswith("runs_"):
            rows = n["Actual Rows"] * n["Actual Loops"]
            read[n["Index Name"]] = read.get(n["Index Name"], 0) + rows
    return read


def test_a_page_of_queued_runs_reads_a_bounded_part_of_the_backlog(
    big: psycopg.Connection[Any],
) -> None:
    """/api/runs?state=queued&limit=500 over 50,000 queued runs (two queues, one priority)
    reads at most `scan` ids per queue from runs_claim_idx, and its "why" at most the
    first 1,001 runs of each queue, not every run ahead of each of the 500."""
    conn = big
    query, _ = data.runs_query(data.RunFilter(state="queued"))
    params = {**FILTERS, **START, "limit": 500}
    read = rows_read(conn, query, params)
    assert set(read) <= {"runs_claim_idx", "runs_pkey"}, read
    assert read["runs_claim_idx"] <= 2 * data.SCAN + 10, read
    assert read["runs_pkey"] <= data.SCAN, read
    ids = [r[3] for r in conn.execute(query, params).fetchall()]
    assert len(ids) == 500 and ids == sorted(ids, reverse=True)
    # two live workers serve both queues, and hold the 2,000 running runs
    conn.execute(
        "INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version)"
        " SELECT gen_random_uuid(), 'h', n, '{crawl,default}', 1000, 't'"
        " FROM generate_series(1, 2) n;"
        "UPDATE pgqueue.runs SET worker_id = (SELECT min(id::text)::uuid FROM pgqueue.workers)"
        " WHERE state = 'running'"
    )
    read = rows_read(conn, _sql.query("dashboard_why"), {"ids": ids})
    queued_read = sum(n for i, n in read.items() if i in ("runs_claim_idx", "runs_group_claim_idx"))
    assert queued_read <= 2 * 1001, read
    # the queue's counts once per queue (2,000 running runs), not once per run asked about
    assert read.get("runs_lease_idx", 0) <= 5 * 2000, read  # 1,035,000 when once per run
    # the runs asked about by primary key, not by filtering a whole index
    grouped = rows_read(conn, _sql.query("dashboard_group_ahead"), {"ids": ids})
    assert grouped.get("runs_pkey") == 500, grouped
    backoffs = rows_read(conn, _sql.query("run_backoffs"), {"ids": ids})
    assert set(backoffs) == {"runs_pkey"}, backoffs
    nodes = plan_nodes(plan(conn, _sql.query("run_backoffs"), {"ids": ids}))
    assert not [n for n in nodes if n["Node Type"].startswith("Gather")], nodes
    # a page further on starts from the cursor, by the same index
    params = {**params, "before_id": ids[-1]}
    read = rows_read(conn, query, params)
    assert read["runs_claim_idx"] <= 2 * data.SCAN + 10, read
    more = [r[3] for r in conn.execute(query, params).fetchall()]
    assert more[0] < ids[-1] and len(more) == 500
