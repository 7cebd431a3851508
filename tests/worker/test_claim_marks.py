"""Claims that start after the worker's last one (sql/claim.sql, semaphores.ClaimMarks):
they skip what was claimed since, and still take every run in priority order, runs that
came back behind the mark included."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import sql as _sql
from pgqueue.worker import semaphores
from pgqueue.worker._claimed import claimed_row
from pgqueue.worker._completer import complete_params
from pgqueue.worker.records import Claimed, Outcome
from pgqueue.worker.semaphores import ClaimMarks
from tests.worker.parts import FROM_FRONT

WORKER = "00000000-0000-0000-0000-000000000001"


def claim(conn: psycopg.Connection[Any], marks: ClaimMarks, limit: int) -> list[Claimed]:
    """One claim of queue `default` the way the worker makes it."""
    params = {"queue": "default", "limit": limit, "worker_id": WORKER, "lease_seconds": 30}
    with conn.cursor(row_factory=claimed_row) as cur:
        rows = cur.execute(_sql.query("claim"), params | marks.start("default")).fetchall()
    marks.landed("default", rows)
    return rows


def ids(rows: list[Claimed]) -> list[int]:
    return sorted(row.id for row in rows)


def give_back(conn: psycopg.Connection[Any], row: Claimed) -> None:
    """The run goes back to `queued` as after RetryAfter(0): complete.sql, refunded."""
    outcome = Outcome(row.id, row.lease_token, "queued", refund=True)
    assert conn.execute(_sql.query("complete"), complete_params([outcome], WORKER)).fetchall()


@pytest.fixture
def runs(app: pgqueue.App) -> list[int]:
    @app.task
    def t(i: int) -> None: ...

    return [h.id for h in t.enqueue_many([(i,) for i in range(30)])]


def test_claims_continue_after_the_mark(conn: psycopg.Connection[Any], runs: list[int]) -> None:
    marks = ClaimMarks(every=math.inf)  # from the front only when there is no mark
    first = claim(conn, marks, 10)
    assert ids(first) == runs[:10]
    assert marks.start("default") == {"after_priority": 0, "after_id": runs[9]}
    give_back(conn, first[2])  # behind the mark now
    # a full batch past the mark: the run that came back waits
    assert ids(claim(conn, marks, 10)) == runs[10:20]
    # fewer past the mark than asked for: the same claim takes it from behind
    assert ids(claim(conn, marks, 20)) == sorted([runs[2], *runs[20:]])
    assert claim(conn, marks, 10) == []
    assert marks.start("default") == FROM_FRONT  # nothing found: from the front again


def test_a_claim_from_the_front_bounds_the_wait(
    conn: psycopg.Connection[Any], runs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(semaphores.time, "monotonic", lambda: clock[0])
    marks = ClaimMarks(every=0.1)
    first = claim(conn, marks, 10)  # from the front (no mark yet)
    give_back(conn, first[0])
    clock[0] += 0.05
    assert ids(claim(conn, marks, 5)) == runs[10:15]  # from the mark
    clock[0] += 0.06  # 0.11 s since the last claim from the front: this one is
    assert ids(claim(conn, marks, 5)) == sorted([runs[0], *runs[15:19]])
    assert marks.start("default") == {"after_priority": 0, "after_id": runs[18]}


def test_more_urgent_runs_go_first_whatever_the_mark(
    app: pgqueue.App, conn: psycopg.Connection[Any], runs: list[int]
) -> None:
    marks = ClaimMarks(every=math.inf)
    claim(conn, marks, 10)

    @app.task
    def u(i: int) -> None: ...

    urgent = u.options(priority=-5).enqueue(1).id
    later = u.options(priority=5).enqueue(2).id
    assert ids(claim(conn, marks, 3)) == sorted([urgent, *runs[10:12]])
    assert marks.start("default") == {"after_priority": 0, "after_id": runs[11]}
    # the less urgent run only after every run of priority 0
    assert ids(claim(conn, marks, 18)) == runs[12:30]
    assert ids(claim(conn, marks, 5)) == [later]


def test_a_mark_never_loses_a_run(conn: psycopg.Connection[Any], runs: list[int]) -> None:
    """Whatever the mark, a queue is drained: a mark past every run reads from behind."""
    marks = ClaimMarks(every=math.inf)
    gone = Claimed(
        runs[-1] + 1000, "noop", "default", [], {}, 1, 3, None, "", 0, "", None, 0, 0, None
    )
    marks.landed("default", [gone])
    assert ids(claim(conn, marks, 50)) == runs
