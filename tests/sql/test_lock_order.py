"""The completer (complete.sql) and the lease keeper (renew_leases.sql) both update the
running runs of one worker. Each takes its row locks in id order, whatever order its
input and its plan give, so the two never deadlock.

The probe: another session holds the lowest id's row; the statement, given its ids in
reverse order, waits for that row. If it locks in id order it holds nothing else while it
waits, and a third session can lock every other row at once (NOWAIT)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql as psql

from pgqueue.db import sql as _sql
from pgqueue.worker._completer import complete_params
from pgqueue.worker.records import Outcome
from tests.helpers import wait_until

WORKER = "00000000-0000-0000-0000-000000000001"


@pytest.fixture
def held(conn: psycopg.Connection[Any]) -> list[tuple[int, str]]:
    """Four running runs of one worker under valid leases: (id, lease token), by id."""
    conn.execute(
        "INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version)"
        " VALUES (%s, 'h', 1, '{default}', 4, 'test')",
        (WORKER,),
    )
    rows = conn.execute(
        """INSERT INTO pgqueue.runs (task, queue, state, attempt, worker_id, lease_token,
                                     lease_expires_at, started_at)
           SELECT 't', 'default', 'running', 1, %s, gen_random_uuid(),
                  now() + interval '1 hour', now()
           FROM generate_series(1, 4)
           RETURNING id, lease_token::text""",
        (WORKER,),
    ).fetchall()
    return sorted((i, t) for i, t in rows)


def renew_params(held: list[tuple[int, str]]) -> dict[str, Any]:
    return {
        "worker_id": WORKER,
        "lease_seconds": 30,
        "id": [i for i, _ in held],
        "lease_token": [t for _, t in held],
        "running": None,
    }


def complete_batch(held: list[tuple[int, str]], first: str = "failed") -> dict[str, Any]:
    """Both paths of complete.sql in one batch: the first run of `held` and every other
    one after it end `first` (succeeded: the plain path; failed: the general path), the
    others the other way. Each path alone locks its rows in id order; the two together
    must too."""
    other = "succeeded" if first == "failed" else "failed"
    outcomes = [
        Outcome(i, t, "succeeded", result="1")
        if (first, other)[k % 2] == "succeeded"
        else Outcome(i, t, "failed", error="x", error_kind="error")
        for k, (i, t) in enumerate(held)
    ]
    return complete_params(outcomes, uuid.UUID(WORKER))


def flip(state: str) -> str:
    return "failed" if state == "succeeded" else "succeeded"


class Statement(threading.Thread):
    """Runs one statement on a connection of its own; its backend pid and result."""

    def __init__(self, dsn: str, query: LiteralString, params: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("SET deadlock_timeout = '50ms'")
        self.pid = self.conn.info.backend_pid
        self.query, self.params = query, params
        self.rows: list[Any] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.rows = self.conn.execute(self.query, self.params).fetchall()
        except BaseException as exc:
            self.error = exc
        finally:
            self.conn.close()


def waiting_for_a_lock(conn: psycopg.Connection[Any], pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return bool(row and row[0])


@pytest.fixture
def sessions(dsn: str) -> Iterator[Callable[[], psycopg.Connection[Any]]]:
    opened: list[psycopg.Connection[Any]] = []

    def new() -> psycopg.Connection[Any]:
        c = psycopg.connect(dsn)
        opened.append(c)
        return c

    yield new
    for c in opened:
        c.close()


def rows_held_while_waiting(
    dsn: str,
    new: Callable[[], psycopg.Connection[Any]],
    ids: list[int],
    query: LiteralString,
    params: dict[str, Any],
) -> list[int]:
    """The rows among `ids` (all but the lowest) that `query` holds locked while it waits
    for the lowest one, which another session holds."""
    first, *others = sorted(ids)
    blocker = new()
    blocker.execute("SELECT 1 FROM pgqueue.runs WHERE id = %s FOR UPDATE", (first,))
    statement = Statement(dsn, query, params)
    statement.start()
    watcher = new()
    watcher.autocommit = True
    wait_until(
        lambda: waiting_for_a_lock(watcher, statement.pid),
        timeout=10,
        message="the statement to wait for the blocked row",
    )
    probe = new()
    taken = []
    for i in others:
        try:
            probe.execute("SELECT 1 FROM pgqueue.runs WHERE id = %s FOR UPDATE NOWAIT", (i,))
        except psycopg.errors.LockNotAvailable:
            taken.append(i)
        probe.rollback()
    blocker.commit()
    statement.join(10)
    assert statement.error is None, statement.error
    assert statement.rows is not None
    return taken


@pytest.mark.parametrize(
    "name", ["complete:lowest succeeded", "complete:lowest failed", "renew_leases"]
)
def test_waits_for_the_lowest_id_holding_no_other_row(
    name: str, dsn: str, held: list[tuple[int, str]], sessions: Any
) -> None:
    # the input in reverse id order: the order is the statement's, not its caller's
    backwards = list(reversed(held))
    name, _, lowest = name.partition(":lowest ")
    if name == "complete":
        # the lowest id, last of `backwards`, ends `lowest`
        params = complete_batch(backwards, lowest if len(held) % 2 else flip(lowest))
    else:
        params = renew_params(backwards)
    taken = rows_held_while_waiting(dsn, sessions, [i for i, _ in held], _sql.query(name), params)
    assert taken == [], f"{name} held {taken} while it waited for run {held[0][0]}"


def test_the_probe_sees_a_statement_that_locks_out_of_order(
    dsn: str, held: list[tuple[int, str]], sessions: Any
) -> None:
    """The check above can fail: a statement that locks in descending id order holds
    every other row when it reaches the lowest."""
    ids = [i for i, _ in held]
    query: LiteralString = (
        "SELECT id FROM pgqueue.runs WHERE id = ANY(%(id)s::bigint[])"
        " ORDER BY id DESC FOR NO KEY UPDATE"
    )
    taken = rows_held_while_waiting(dsn, sessions, ids, query, {"id": ids})
    assert taken == ids[1:]


def test_completer_and_lease_keeper_on_the_same_rows_do_not_deadlock(
    dsn: str, held: list[tuple[int, str]], sessions: Any
) -> None:
    """A renewal, then a completion of the same runs, queue behind a session holding the
    lowest row. When it lets go, the renewal takes that row first and then needs the
    others: a completion that took them while it waited (out of id order) would now wait
    for the renewal, which waits for it. Both finish."""
    blocker = sessions()
    blocker.execute("SELECT 1 FROM pgqueue.runs WHERE id = %s FOR UPDATE", (held[0][0],))
    watcher = sessions()
    watcher.autocommit = True
    backwards = list(reversed(held))
    renew = Statement(dsn, _sql.query("renew_leases"), renew_params(held))
    # the lowest id fails (the general path), its neighbour succeeds (the plain path)
    complete = Statement(
        dsn,
        _sql.query("complete"),
        complete_batch(backwards, "failed" if len(held) % 2 else "succeeded"),
    )
    for s in (renew, complete):
        s.start()
        wait_until(lambda s=s: waiting_for_a_lock(watcher, s.pid), timeout=10, message="a wait")  # type: ignore[misc]
    blocker.commit()
    for s in (renew, complete):
        s.join(10)
        assert not s.is_alive()
    assert renew.error is None and complete.error is None, (renew.error, complete.error)
    assert renew.rows is not None and len(renew.rows) == len(held)
    assert complete.rows is not None and len(complete.rows) == len(held)
    states = watcher.execute(
        psql.SQL("SELECT state, count(*) FROM pgqueue.runs GROUP BY state ORDER BY state")
    ).fetchall()
    assert states == [("failed", 2), ("succeeded", 2)]
