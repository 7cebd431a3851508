"""Faults on the wire (pgqueue.db.faults, pgqueue.db.pool): a connection the server killed
while it sat idle is known dead without a round trip and never handed out; errors are
named for what they are."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors

import pgqueue
from pgqueue.db import connect as db
from pgqueue.db import faults as _faults
from pgqueue.db import pool as _pool
from pgqueue.worker._service import outage_delay
from tests.helpers import wait_until


def terminate(dsn: str, pids: list[int]) -> None:
    """pg_terminate_backend of `pids`, waiting until they are gone."""
    with psycopg.connect(dsn, autocommit=True) as killer:
        killer.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", (pids,))

        def gone() -> bool:
            row = killer.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
            ).fetchone()
            return row is not None and row[0] == 0

        wait_until(gone, timeout=10, message="the backends to end")


def test_an_idle_connection_killed_by_the_server_is_dead_without_a_round_trip(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as alive, psycopg.connect(dsn, autocommit=True) as c:
        terminate(dsn, [c.info.backend_pid])
        # the goodbye reaches the socket a moment after the backend is gone
        wait_until(lambda: _faults.dead(c), timeout=5, message="the socket to show it")
        assert not _faults.dead(alive)
        assert alive.execute("SELECT 1").fetchone() == (1,)


def test_the_pool_hands_out_live_connections_after_every_idle_one_was_killed(dsn: str) -> None:
    with _pool.CheckedPool(dsn, min_size=3, max_size=3, kwargs={"autocommit": True}) as pool:
        pool.wait(10)
        pids = []
        conns = [pool.getconn() for _ in range(3)]
        for conn in conns:
            pids.append(conn.info.backend_pid)
            pool.putconn(conn)
        terminate(dsn, pids)
        for _ in range(6):  # each call would otherwise meet a dead connection
            with pool.connection() as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
                assert conn.info.backend_pid not in pids


def test_the_async_pool_hands_out_live_connections_too(dsn: str) -> None:
    async def main() -> list[int]:
        pool = _pool.AsyncCheckedPool(
            dsn, min_size=2, max_size=2, kwargs={"autocommit": True}, open=False
        )
        async with pool:
            await pool.wait(10)
            conns = [await pool.getconn() for _ in range(2)]
            pids = [c.info.backend_pid for c in conns]
            for c in conns:
                await pool.putconn(c)
            await asyncio.to_thread(terminate, dsn, pids)
            seen = []
            for _ in range(4):
                async with pool.connection() as conn:
                    await conn.execute("SELECT 1")
                    seen.append(conn.info.backend_pid)
            return [p for p in seen if p in pids]

    assert asyncio.run(main()) == []


def test_the_apps_calls_go_on_after_its_connections_were_killed(app: pgqueue.App, dsn: str) -> None:
    @app.task
    def t() -> None: ...

    handle = t.enqueue()
    with app.connection() as conn:
        pid = conn.info.backend_pid
    terminate(dsn, [pid])
    assert app.get_run(handle.id).state == "queued"  # not an OperationalError
    assert t.enqueue().id > handle.id


def errors_of(dsn: str) -> dict[str, BaseException]:
    found: dict[str, BaseException] = {}
    with psycopg.connect(dsn, autocommit=True) as c:
        try:
            c.execute("EXECUTE _pg3_0")
        except psycopg.Error as exc:
            found["missing prepared statement"] = exc
        try:
            c.execute("SELECT 1/0")
        except psycopg.Error as exc:
            found["division by zero"] = exc
    victim = psycopg.connect(dsn, autocommit=True)
    terminate(dsn, [victim.info.backend_pid])
    try:
        victim.execute("SELECT 1")
    except psycopg.Error as exc:
        found["terminated"] = exc
    victim.close()
    try:
        victim.execute("SELECT 1")
    except psycopg.Error as exc:
        found["closed"] = exc
    return found


def test_errors_are_named_for_what_they_are(dsn: str) -> None:
    found = errors_of(dsn)
    assert set(found) == {"missing prepared statement", "division by zero", "terminated", "closed"}
    assert isinstance(found["missing prepared statement"], pg_errors.InvalidSqlStatementName)
    assert _faults.lost(found["terminated"]) and _faults.lost(found["closed"])
    assert not _faults.lost(found["missing prepared statement"])
    assert not _faults.lost(found["division by zero"])
    assert _faults.describe(found["terminated"]).startswith("connection lost (")
    pooler = _faults.describe(found["missing prepared statement"])
    assert pooler.startswith("protocol error (") and "pooler='transaction'" in pooler
    protocol = pg_errors.ProtocolViolation("unsupported pkt type: 80")
    assert not _faults.lost(protocol)
    assert _faults.describe(protocol).startswith("protocol error (unsupported pkt type: 80)")
    down = psycopg.OperationalError("connection refused")
    assert _faults.describe(down).startswith("connection lost (")
    assert _faults.describe(pg_errors.CannotConnectNow("starting up")).startswith(
        "connection lost ("
    )


def test_a_lost_connection_is_retried_at_once_and_only_once(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    killed = errors_of(dsn)["terminated"]
    caplog.set_level(logging.DEBUG, "pgqueue.worker")
    assert outage_delay("claim", killed, 1) == 0.0
    assert outage_delay("claim", killed, 2) > 0  # the fresh connection failed too
    assert outage_delay("claim", pg_errors.ProtocolViolation("bad"), 1) > 0
    lines = [r.getMessage() for r in caplog.records]
    assert "retrying at once on a fresh connection" in lines[0]
    assert caplog.records[0].levelno == logging.DEBUG  # one killed connection: no outage
    assert any("protocol error (bad)" in line for line in lines[1:]), lines


def test_pooler_values_are_checked(monkeypatch: Any) -> None:
    assert db.resolve_pooler("Transaction") == "transaction"
    assert db.resolve_pooler("none") is None
    monkeypatch.setenv(db.POOLER_ENV, "session")
    assert db.resolve_pooler(None) == "session"
    assert pgqueue.App("dbname=x").pooler == "session"
    monkeypatch.setenv(db.POOLER_ENV, "statement")
    with pytest.raises(pgqueue.ConfigError, match=r"PGQUEUE_POOLER must be one of none, sess"):
        pgqueue.App("dbname=x")
    with pytest.raises(pgqueue.ConfigError, match=r"^pooler must be one of .* not 'bouncer'"):
        pgqueue.App("dbname=x", pooler="bouncer")


def test_transaction_mode_means_polling_and_no_prepared_statements() -> None:
    app = pgqueue.App("dbname=x", pooler="transaction")
    assert (app.notify, app.listens) == (False, False)
    told = pgqueue.App("dbname=x", pooler="transaction", notify=True)
    assert (told.notify, told.listens) == (True, False)  # NOTIFY at enqueue, never LISTEN
    assert db.connect_kwargs("transaction")["prepare_threshold"] is None
    assert "prepare_threshold" not in db.connect_kwargs("session")
    plain = pgqueue.App("dbname=x")
    plain.configure(pooler="transaction")
    assert (plain.pooler, plain.listens) == ("transaction", False)
