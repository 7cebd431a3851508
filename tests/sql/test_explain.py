"""Every hot query reads the index meant for it, even with a large history around it."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any

import psycopg
import pytest

from pgqueue.db import sql as _sql
from pgqueue.worker._completer import complete_params
from pgqueue.worker.connection import configure_connection, worker_dsn
from pgqueue.worker.records import Outcome
from tests.helpers import plan_nodes
from tests.worker.parts import FROM_FRONT

WORKER = "00000000-0000-0000-0000-000000000001"
# The index of each Bitmap Index Scan node of a JSON plan.
BITMAP_INDEX = re.compile(r'"Node Type": "Bitmap Index Scan",[^{}]*?"Index Name": "(\w+)"')


@pytest.fixture
def big(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """100,000 finished runs, 100,000 future runs, 100,000 runs of another queue and
    5,000 running runs."""
    conn.execute("""
        INSERT INTO pgqueue.runs (task, queue, state, finished_at)
        SELECT 't', 'default', 'succeeded', now() FROM generate_series(1, 100000);
        INSERT INTO pgqueue.runs (task, queue, state, run_at)
        SELECT 't', 'default', 'scheduled', now() + interval '1 day'
        FROM generate_series(1, 100000);
        INSERT INTO pgqueue.runs (task, queue, state) SELECT 't', 'other', 'queued'
        FROM generate_series(1, 100000);
        INSERT INTO pgqueue.runs (task, queue, state) SELECT 't', 'default', 'queued'
        FROM generate_series(1, 50);
        INSERT INTO pgqueue.runs (task, queue, state, lease_token, lease_expires_at)
        SELECT 't', 'default', 'running', gen_random_uuid(), now() + interval '1 hour'
        FROM generate_series(1, 5000);
        ANALYZE pgqueue.runs;
    """)
    return conn


def plan(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> str:
    """The generic JSON plan of the named query (sql/<name>.sql)."""
    return plan_of(conn, _sql.query(name), params)


def plan_of(conn: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> str:
    """The generic JSON plan of `query`, as a prepared statement would run it."""
    with conn.transaction():
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        rows = conn.execute(f"EXPLAIN (FORMAT JSON) {query}", params).fetchall()
    return json.dumps(rows[0][0])


def relation_scans(text: str) -> list[tuple[str, str, str | None]]:
    """(relation, node type, index) of every node of a JSON plan that names a relation."""
    return [
        (node["Relation Name"], node["Node Type"], node.get("Index Name"))
        for node in plan_nodes(json.loads(text))
        if "Relation Name" in node
    ]


def scans(text: str) -> list[tuple[str, str | None]]:
    """(node type, index) of every node of a JSON plan that reads or writes pgqueue.runs."""
    return [(kind, index) for rel, kind, index in relation_scans(text) if rel == "runs"]


def assert_uses(text: str, *indexes: str) -> None:
    found = scans(text)
    assert all("Seq Scan" not in kind for kind, _ in found), found
    assert any(name in indexes for _, name in found), found


def test_hot_queries_use_their_indexes(big: psycopg.Connection[Any]) -> None:
    # One test, one large fixture: building 300,000 rows per test would slow the suite.
    claim = {
        "queue": "default",
        "limit": 10,
        "worker_id": WORKER,
        "lease_seconds": 30,
        **FROM_FRONT,
    }
    # From the front, and from a mark (the worker's claims after its first): three scans
    # of runs_claim_idx (ahead, onward, behind), and the update by the locked versions'
    # TIDs (no second walk down the primary key per run).
    for start in (FROM_FRONT, {"after_priority": 0, "after_id": 250_000}):
        text = plan(big, "claim", claim | start)
        # now and then (a few ANALYZE samples in a hundred) the planner reads one of the
        # three as a bitmap scan of runs_claim_idx: the same index
        bitmaps = set(BITMAP_INDEX.findall(text))
        found = [
            ("Index Scan", "runs_claim_idx")
            if kind == "Bitmap Heap Scan" and bitmaps - {"queues_pkey"} == {"runs_claim_idx"}
            else (kind, index)
            for kind, index in scans(text)
            if kind != "ModifyTable"
        ]
        assert sorted(index or kind for kind, index in found) == sorted(
            ["runs_claim_idx"] * 3 + ["Tid Scan"]
        ), found
    assert_uses(plan(big, "stage_due", {"queue": "default", "limit": 100}), "runs_scheduled_idx")
    assert_uses(plan(big, "rescue_expired", {"queue": "default", "limit": 100}), "runs_lease_idx")
    by_id: dict[str, Any] = {
        "id": [1, 2],
        "lease_token": [None, None],
        "worker_id": WORKER,
        "lease_seconds": 30,
        "running": [str(uuid.UUID(int=1))],
    }
    # Writes by id: the primary key, never a walk over every running run of the cluster
    # (a completion's cost would grow with their number).
    # complete.sql has two paths, plain successes and a document for everything else:
    # both in one batch (with either input empty, the planner folds that path away and
    # may name any index for it).
    outcomes = [
        Outcome(1, str(uuid.UUID(int=1)), "succeeded", result="null"),
        Outcome(2, str(uuid.UUID(int=2)), "failed", error="x", error_kind="error"),
    ]
    complete = complete_params(outcomes, WORKER)
    assert complete["succeeded"] == "{1}" and '"id": 2' in complete["outcomes"]
    progress = {"id": 1, "lease_token": str(uuid.UUID(int=1)), "progress": '{"done": 1}'}
    for name, params in (
        ("renew_leases", by_id),
        ("complete", complete),
        ("set_progress", progress),
        ("watch_runs", {"ids": [1, 2]}),  # the start of a batch of wait_async
    ):
        text = plan(big, name, params)
        runs = [index for _, index in scans(text) if index and index.startswith("runs_")]
        assert runs and set(runs) == {"runs_pkey"}, (name, scans(text))
        assert all("Seq Scan" not in kind for kind, _ in scans(text)), (name, scans(text))
    # Retention: finished runs by age; the parent check probes the primary key per run.
    prune = {"state": "succeeded", "older_than": 0, "limit": 1000, "tallied_only": True}
    assert_uses(plan(big, "prune_runs", prune), "runs_finished_queue_idx")
    prune["state"] = "failed"
    assert_uses(plan(big, "prune_runs_failed", prune), "runs_failed_idx")
    # The tally of finished runs reads them from its mark, and what reads the last hour
    # reads the tally and, after the mark, the same index: never the history.
    assert_uses(plan(big, "tally_finished", {"lag_seconds": 10}), "runs_finished_queue_idx")
    # Completed batches: a probe of runs_batch_idx and of the primary key per candidate.
    batches = scans(plan(big, "prune_batches", {"limit": 1000}))
    assert all("Seq Scan" not in kind for kind, _ in batches), batches
    for name in ("dashboard_throughput", "queue_summary"):
        assert_uses(plan(big, name, {}), "runs_finished_queue_idx")
    assert_uses(plan(big, "dashboard_queue", {"queue": "default"}), "runs_finished_queue_idx")


def test_claim_plan_check_can_fail(conn: psycopg.Connection[Any]) -> None:
    """Without its index the claim scans the table, and the check above notices."""
    conn.execute("DROP INDEX pgqueue.runs_claim_idx")
    conn.execute("ANALYZE pgqueue.runs")
    claim = {
        "queue": "default",
        "limit": 10,
        "worker_id": WORKER,
        "lease_seconds": 30,
        **FROM_FRONT,
    }
    with pytest.raises(AssertionError):
        assert_uses(plan(conn, "claim", claim), "runs_claim_idx")


def test_enqueue_statements_read_no_runs(conn: psycopg.Connection[Any]) -> None:
    """Enqueue inserts without reading pgqueue.runs (no check that scans it, whatever its
    size); a taken idempotency key is caught by its unique index, and its holder found by
    that index too."""
    conn.execute("""
        INSERT INTO pgqueue.runs (task, queue, state, finished_at, idempotency_key)
        SELECT 't', 'default', 'succeeded', now(), 'key-' || g FROM generate_series(1, 20000) g;
        ANALYZE pgqueue.runs;
    """)
    run = '[[1], {}, null, "key-1", "t", "default", 0, 3]'
    common = {"notify": True, "headers": None, "batch_id": None}
    batch = common | {"runs": f'[[[2], {{}}, null, null, "t", "default", 0, 3], {run}]'}
    many = common | {
        "runs": '[[[1], {}], [[2], {}, "g"]]',
        "shared": '[[], {}, null, null, "t", "default", 0, 3]',
        "grouped": True,
    }
    one = common | {"runs": f"[{run}]", "run": run}
    for name, params in (
        ("enqueue_runs", batch),
        ("enqueue_runs_plain", many),
        ("enqueue_runs_keyed", batch),
        ("enqueue_run", one),
        ("enqueue_run_plain", one),
    ):
        text = plan(conn, name, params)
        assert scans(text) == [("ModifyTable", None)], (name, scans(text))
        arbiter = '"Conflict Arbiter Indexes": ["runs_idempotency_key_idx"]' in text
        # ON CONFLICT only where keys are
        plain = ("enqueue_runs", "enqueue_runs_plain", "enqueue_run_plain")
        assert arbiter == (name not in plain), name
    holders = plan(conn, "runs_by_idempotency_key", {"keys": ["key-1", "key-2"]})
    assert_uses(holders, "runs_idempotency_key_idx")


def test_worker_connections_plan_the_claim_once(dsn: str) -> None:
    """The worker's connections use the generic plans checked above: the claim is not
    re-planned per call (left to choose, the server picks a custom plan every time).
    Asked for at startup (worker_dsn), not with a SET; not through a pooler."""
    claim = {
        "queue": "default",
        "limit": 10,
        "worker_id": WORKER,
        "lease_seconds": 30,
        **FROM_FRONT,
    }

    async def plans(pooler: str | None) -> tuple[int, int]:
        target = worker_dsn(dsn, pooler)
        async with await psycopg.AsyncConnection.connect(target, autocommit=True) as aconn:
            await configure_connection(aconn)
            for _ in range(8):
                await aconn.execute(_sql.query("claim"), claim, prepare=True)
            cur = await aconn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE '%%ahead AS (%%'"
            )
            row = await cur.fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

    assert asyncio.run(plans(None)) == (8, 0)
    _, custom = asyncio.run(plans("session"))
    assert custom > 0  # the check can fail: without the setting the claim is re-planned
