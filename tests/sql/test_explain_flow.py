"""The statements of uniqueness and batches read the indexes meant for them, and runs
outside a batch never call the batch triggers' functions."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg

from pgqueue.db import sql as _sql
from tests.sql.test_explain import assert_uses, plan, plan_of, relation_scans


def _history(conn: psycopg.Connection[Any]) -> None:
    """60,000 runs: finished ones with retained unique keys, waiting ones with queued-scope
    keys, and batch members."""
    conn.execute("""
        INSERT INTO pgqueue.batch_heads (on_complete, queue) VALUES ('t', 'default');
        INSERT INTO pgqueue.runs (task, queue, state, finished_at, unique_key, unique_while)
        SELECT 't', 'default', 'succeeded', now(), 'done-' || g, 'retained'
        FROM generate_series(1, 20000) g;
        INSERT INTO pgqueue.runs (task, queue, state, unique_key, unique_while)
        SELECT 't', 'default', 'queued', 'wait-' || g, 'queued'
        FROM generate_series(1, 20000) g;
        INSERT INTO pgqueue.runs (task, queue, state, batch_id)
        SELECT 't', 'default', 'queued', 1 FROM generate_series(1, 20000);
        INSERT INTO pgqueue.runs (task, queue, state) SELECT 't', 'default', 'queued'
        FROM generate_series(1, 20000);
        ANALYZE pgqueue.runs;
    """)


def test_sealing_a_batch_counts_its_members_through_runs_batch_idx(
    conn: psycopg.Connection[Any],
) -> None:
    _history(conn)
    text = plan(conn, "batch_seal", {"id": 1})  # an index scan, or a bitmap scan of it
    assert "Seq Scan" not in text and '"Index Name": "runs_batch_idx"' in text, text


def test_the_holder_of_a_unique_key_is_found_through_runs_unique_key_idx(
    conn: psycopg.Connection[Any],
) -> None:
    """The lookup inside pgqueue.enqueue_unique(), as the function's file writes it."""
    _history(conn)
    text = _sql.definition("functions/enqueue_unique")
    found = re.search(
        r"SELECT r\.id, r\.created_at INTO [^\n]*\n(.*?)FOR NO KEY UPDATE", text, re.S
    )
    assert found is not None
    lookup = "SELECT r.id, r.created_at\n" + found.group(1).replace("= key", "= %(key)s::text")
    assert_uses(plan_of(conn, lookup, {"key": "wait-7"}), "runs_unique_key_idx")


def test_the_running_holder_that_cancel_running_replaces_is_found_through_runs_unique_key_idx(
    conn: psycopg.Connection[Any],
) -> None:
    """on_duplicate="cancel_running" looks its holder up with the same statement: a run in
    scope 'active' that is running, among 20,000 others that are, is read through the
    index (the cancel that follows reads the run by its id)."""
    _history(conn)
    conn.execute("""
        INSERT INTO pgqueue.runs (task, queue, state, started_at, attempt, lease_token,
                                  lease_expires_at, unique_key, unique_while)
        SELECT 't', 'default', 'running', now(), 1, gen_random_uuid(),
               now() + interval '30 s', 'run-' || g, 'active'
        FROM generate_series(1, 20000) g;
        ANALYZE pgqueue.runs;
    """)
    text = _sql.definition("functions/enqueue_unique")
    found = re.search(
        r"SELECT r\.id, r\.created_at INTO [^\n]*\n(.*?)FOR NO KEY UPDATE", text, re.S
    )
    assert found is not None and "pgqueue.cancel(holder_id" in text
    lookup = "SELECT r.id, r.created_at\n" + found.group(1).replace("= key", "= %(key)s::text")
    assert_uses(plan_of(conn, lookup, {"key": "run-7"}), "runs_unique_key_idx")
    assert conn.execute(lookup, {"key": "run-7"}).fetchall() != []


def _batches(conn: psycopg.Connection[Any]) -> None:
    """20,000 settled batches with a slot each, and 10 sealed ones still open."""
    conn.execute("""
        INSERT INTO pgqueue.batch_heads (on_complete, queue, total, sealed_at, completed_at)
        SELECT 't', 'default', 1, now(), CASE WHEN g > 10 THEN now() END
        FROM generate_series(1, 20010) g;
        INSERT INTO pgqueue.batch_counts (batch_id, slot, succeeded)
        SELECT id, 0, 1 FROM pgqueue.batch_heads;
        ANALYZE pgqueue.batch_heads;
        ANALYZE pgqueue.batch_counts;
    """)


def _batch_scans(text: str) -> set[tuple[str, str, str | None]]:
    """(relation, node type, index) of each scan of a batch table in a JSON plan."""
    return {scan for scan in relation_scans(text) if scan[0].startswith("batch_")}


def test_the_sweep_of_open_batches_reads_their_index_and_their_slots(
    conn: psycopg.Connection[Any],
) -> None:
    _batches(conn)
    found = _batch_scans(plan(conn, "settle_open_batches", {"limit": 100}))
    assert {r for r, kind, _ in found if "Seq Scan" in kind} == set(), found
    assert {i for _, _, i in found} == {"batch_heads_open_idx", "batch_counts_pkey"}, found


def test_a_batch_and_its_counts_are_read_through_the_primary_keys(
    conn: psycopg.Connection[Any],
) -> None:
    _batches(conn)
    found = _batch_scans(plan(conn, "get_batch", {"id": 5000}))
    assert {r for r, kind, _ in found if "Seq Scan" in kind} == set(), found
    assert {i for _, _, i in found} == {"batches_pkey", "batch_counts_pkey"}, found


def _calls(conn: psycopg.Connection[Any], function: str) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
        " WHERE schemaname = 'pgqueue' AND funcname = %s",
        (function,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_runs_outside_a_batch_call_no_batch_trigger_function(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute("""
        INSERT INTO pgqueue.batch_heads (on_complete, queue, total) VALUES ('t', 'default', 50);
        INSERT INTO pgqueue.runs (task, queue, state) SELECT 't', 'default', 'queued'
        FROM generate_series(1, 100);
        INSERT INTO pgqueue.runs (task, queue, state, batch_id)
        SELECT 't', 'default', 'queued', 1 FROM generate_series(1, 50);
    """)
    with conn.transaction():
        conn.execute("SET LOCAL track_functions = 'all'")
        conn.execute("SET CONSTRAINTS pgqueue.runs_batch_flush IMMEDIATE")  # fire per statement
        conn.execute(
            "UPDATE pgqueue.runs SET state = 'canceled', finished_at = now() WHERE batch_id IS NULL"
        )
        assert _calls(conn, "batch_flush") == 0
        conn.execute("UPDATE pgqueue.runs SET state = 'scheduled' WHERE batch_id = 1")
        assert _calls(conn, "batch_flush") == 0  # members, not to a terminal state
        conn.execute(
            "UPDATE pgqueue.runs SET state = 'canceled', finished_at = now() WHERE batch_id = 1"
        )
        assert _calls(conn, "batch_flush") == 1  # once for the 50 members
    row = conn.execute("SELECT canceled, callback_run_id FROM pgqueue.batches").fetchone()
    assert row is not None and row[0] == 50 and row[1] is not None


def test_the_note_of_a_member_change_is_not_inlined_into_the_trigger_condition(
    conn: psycopg.Connection[Any],
) -> None:
    """pgqueue.batch_note() stays a function call in the trigger's condition: the server
    prepares that condition once per statement that updates runs (every claim and
    completion, batch or not), and an inlined SQL function's body would be parsed and
    analysed each time. It is called for members of a batch only."""
    rows = conn.execute(
        "EXPLAIN (VERBOSE, FORMAT JSON) SELECT pgqueue.batch_note('running', 'succeeded', 1)"
    ).fetchall()
    assert "batch_note" in json.dumps(rows[0][0])
    condition = conn.execute(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'runs_batch_flush'"
    ).fetchone()
    assert condition is not None
    assert condition[0].index("batch_id IS NOT NULL") < condition[0].index("batch_note")
