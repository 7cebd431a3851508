"""Migration 0024 (issue 43): the totals start from the runs already in the table (those
the tally's mark has passed; the rest the dashboard reads live), and its tables and
indexes exist."""

from __future__ import annotations

from typing import Any

import psycopg

from pgqueue.db import migrate
from tests.sql.test_migrations import database_at


def test_upgrade_to_0024_counts_the_finished_runs_already_there(
    server_params: dict[str, Any],
) -> None:
    with database_at(server_params, "0023") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE pgqueue.tally_mark SET upto = now() - interval '1 hour'")
            conn.execute(
                "INSERT INTO pgqueue.runs (task, queue, state, finished_at)"
                " SELECT 't', q, s, now() - interval '2 hours'"
                " FROM unnest(ARRAY['a', 'a', 'b']) q,"
                "      unnest(ARRAY['succeeded', 'failed', 'queued']) s;"
                # after the mark: not in the totals table, read live by the dashboard
                "INSERT INTO pgqueue.runs (task, queue, state, finished_at)"
                " VALUES ('t', 'a', 'failed', now())"
            )
        migrate.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            totals = conn.execute(
                "SELECT queue, state, n FROM pgqueue.finished_totals ORDER BY 1, 2"
            ).fetchall()
            indexes = conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = 'pgqueue'"
                " AND indexname IN ('runs_finished_task_idx', 'runs_finished_queue_idx',"
                " 'audit_run_idx') ORDER BY 1"
            ).fetchall()
    assert totals == [
        ("a", "failed", 2),
        ("a", "succeeded", 2),
        ("b", "failed", 1),
        ("b", "succeeded", 1),
    ]
    # runs_finished_task_idx, which 0024 built, 0033 drops (built on request since)
    assert indexes == [("audit_run_idx",), ("runs_finished_queue_idx",)]
