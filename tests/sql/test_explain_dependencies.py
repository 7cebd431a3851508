"""The dependency wait costs the claim nothing: a run waiting for its dependencies is
`waiting`, outside every index the claims read (runs_claim_idx, runs_group_claim_idx: queued
runs only), so a claim with 100,000 of them in its queue reads the queued runs alone.

Two proofs: the claim's plan reads only runs_claim_idx (whose predicate is state =
'queued'), and a claim run for real, plain and limited (pgqueue.claim_limited()), fetches a
few dozen rows of pgqueue.runs in its transaction (pg_stat_xact_user_tables), not the
waiting dependents. And the release, in the transaction that finishes a dependency, finds
its dependents through runs_after_idx, not by reading the waiting runs."""

from __future__ import annotations

import re
import uuid
from typing import Any

import psycopg
import pytest

from pgqueue.db import sql as _sql
from tests.sql.test_explain import plan, plan_of, scans
from tests.worker.parts import FROM_FRONT

WORKER = "00000000-0000-0000-0000-000000000001"
WAITING = 100_000


@pytest.fixture
def dependents(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """A running dependency and 100,000 runs waiting for it in each of two queues, one
    plain, one limited, each also holding 50 queued runs."""
    conn.execute(
        """
        INSERT INTO pgqueue.queues (name, concurrency) VALUES ('limited', 10);
        INSERT INTO pgqueue.runs (task, queue, state, lease_token, lease_expires_at,
                                  has_dependents)
        VALUES ('t', 'default', 'running', gen_random_uuid(), now() + interval '1 hour', true);
        -- inserted without `after`, then given it: as the enqueue trigger would leave them,
        -- without 200,000 trigger calls
        INSERT INTO pgqueue.runs (task, queue, state, run_at, limited)
        SELECT 't', q, 'waiting', '9999-12-31 00:00:00+00', q = 'limited'
        FROM generate_series(1, %(waiting)s), unnest(ARRAY['default', 'limited']) AS q;
        UPDATE pgqueue.runs SET after = ARRAY[1::bigint], on_dependency_failure = 'cancel'
         WHERE state = 'waiting';
        INSERT INTO pgqueue.runs (task, queue, state, limited)
        SELECT 't', q, 'queued', q = 'limited'
        FROM generate_series(1, 50), unnest(ARRAY['default', 'limited']) AS q;
        ANALYZE pgqueue.runs;
    """.replace("%(waiting)s", str(WAITING))
    )
    return conn


def runs_read(conn: psycopg.Connection[Any]) -> int:
    """Rows of pgqueue.runs this transaction read, by scans and through indexes."""
    row = conn.execute(
        "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)"
        " FROM pg_stat_xact_user_tables WHERE schemaname = 'pgqueue' AND relname = 'runs'"
    ).fetchone()
    return int(row[0]) if row else 0


def test_the_claim_plan_reads_only_the_queued_runs_index(
    dependents: psycopg.Connection[Any],
) -> None:
    conn = dependents
    claim = {"queue": "default", "limit": 10, "worker_id": WORKER, "lease_seconds": 30}
    found = {index or kind for kind, index in scans(plan(conn, "claim", claim | FROM_FRONT))}
    assert found <= {"runs_claim_idx", "Tid Scan", "ModifyTable"}, found
    definition = conn.execute(
        "SELECT pg_get_indexdef('pgqueue.runs_claim_idx'::regclass)"
    ).fetchone()
    assert definition is not None and definition[0].endswith("WHERE (state = 'queued'::text)")


@pytest.mark.parametrize("queue", ["default", "limited"])
def test_a_claim_reads_the_queued_runs_not_the_waiting_dependents(
    dependents: psycopg.Connection[Any], queue: str
) -> None:
    conn = dependents
    conn.execute(
        "INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version)"
        " VALUES (%s, 'h', 1, %s, 10, 'test')",
        (WORKER, [queue]),
    )
    params: dict[str, Any] = {
        "queue": queue,
        "limit": 10,
        "worker_id": uuid.UUID(WORKER),
        "lease_seconds": 30,
        "finishing": [],
        **FROM_FRONT,
    }
    with conn.transaction():
        before = runs_read(conn)
        name = "claim" if queue == "default" else "claim_limited"
        claimed = conn.execute(_sql.query(name), params).fetchall()
        read = runs_read(conn) - before
    assert len(claimed) == 10
    # the 50 queued runs at most, a few times over; never the 100,000 waiting
    assert read < 500, read
    assert conn.execute(
        "SELECT count(*) FROM pgqueue.runs WHERE state = 'waiting' AND queue = %s", (queue,)
    ).fetchone() == (WAITING,)


def test_the_release_finds_a_dependencys_dependents_through_runs_after_idx(
    dependents: psycopg.Connection[Any],
) -> None:
    """The lookup in pgqueue.runs_dependency_done(), as the function's file writes it: the
    runs waiting for a finished run, among 200,000 waiting runs, by runs_after_idx."""
    text = _sql.definition("functions/runs_dependency_done")
    found = re.search(r"FOR d IN\s+(SELECT r\.id.*?)\s+FOR NO KEY UPDATE", text, re.S)
    assert found is not None
    lookup = found.group(1).replace("frontier", "%(frontier)s::bigint[]")
    used = plan_of(dependents, lookup, {"frontier": [2]})
    assert "Seq Scan" not in used and '"Index Name": "runs_after_idx"' in used, used
