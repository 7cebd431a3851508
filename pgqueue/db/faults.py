"""Faults on the wire: which errors mean "this connection is gone" (retry at once on a
fresh one), which mean "the protocol went wrong" (a pooler that does not fit the
connection's use), which mean "this server takes no writes" (a standby: wait for a
primary), and how to tell, without a round trip, that an idle connection died.

A connection the server terminated while it sat idle in a pool (pg_terminate_backend, a
restart, a pooler that recycled its server connection) has the server's goodbye waiting
in its socket: an ErrorResponse and the end of the stream. An idle connection that nobody
LISTENs on receives nothing else, so a readable socket means the connection is dead (or,
rarely, that the server reported a changed parameter: discarding it then costs one
reconnect). `dead()` polls the socket without blocking, a microsecond or two, where
psycopg_pool's own check sends a query and waits for its answer.
"""

from __future__ import annotations

import select
import sys
from typing import Any

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg_pool import PoolTimeout

from pgqueue.db import connect as db
from pgqueue.errors import DatabaseUnavailable

# SQLSTATEs that end the session (the backend is gone or going): class 08 (connection
# exception) except the protocol violation, and the operator's interventions in class 57.
_LOST_STATES = {"57P01", "57P02", "57P03", "57P04", "57P05"}
PROTOCOL_VIOLATION = "08P01"
# Errors a pooler in transaction mode causes for a client that expects a session of its
# own: its prepared statements live on server connections it no longer holds.
_POOLER_STATES = {
    "26000",  # invalid_sql_statement_name: prepared statement "_pg3_0" does not exist
    "42P05",  # duplicate_prepared_statement: prepared statement "_pg3_0" already exists
    PROTOCOL_VIOLATION,
}
# A server in recovery (a standby) refuses every write and LISTEN with
# read_only_sql_transaction ("cannot execute LISTEN during recovery"). libpq, asked for a
# primary (target_session_attrs=read-write or primary), says so in its own words when
# every host it reached is a standby: during a failover, before the promotion.
READ_ONLY = "25006"
_NO_PRIMARY = ("session is read-only", "server is in hot standby mode")


# Errors that mean "the database cannot answer right now" (gone, unreachable, a pool
# without a connection, a standby that takes no writes): wait and try again, never crash.
UNAVAILABLE = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    PoolTimeout,
    psycopg.errors.ReadOnlySqlTransaction,
    DatabaseUnavailable,  # a pool's timeout, as App.connection() raises it
)


def lost(exc: BaseException) -> bool:
    """Whether `exc` means the connection it came from is unusable (killed, dropped,
    closed), as against the database refusing the statement: a retry on another
    connection may succeed at once."""
    if isinstance(exc, psycopg.InterfaceError):
        return True  # the connection was closed (by us, or found broken)
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = getattr(exc, "sqlstate", None)
    if state is None:
        return True  # libpq's own: "server closed the connection unexpectedly", EOF...
    if state == PROTOCOL_VIOLATION:
        return False
    return state.startswith("08") or state in _LOST_STATES


def pooler_error(exc: BaseException) -> bool:
    """Whether `exc` is what a transaction-mode pooler does to session-level features."""
    state = getattr(exc, "sqlstate", None)
    if state in _POOLER_STATES:
        return True
    text = str(exc).lower()
    return "protocol" in text or ("prepared statement" in text and "_pg3_" in text)


def standby(exc: BaseException) -> bool:
    """Whether `exc` says the server reached takes no writes: a standby (or a session
    made read-only), or no primary among a multi-host DSN's hosts."""
    if getattr(exc, "sqlstate", None) == READ_ONLY:
        return True
    text = str(exc)
    return isinstance(exc, psycopg.OperationalError) and any(m in text for m in _NO_PRIMARY)


def on_standby(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether `conn` was opened on a standby, as the server last reported (PostgreSQL 14+
    reports in_hot_standby at startup, and again at the first statement after a
    promotion); no round trip."""
    return conn.info.parameter_status("in_hot_standby") == "on"


def describe(exc: BaseException) -> str:
    """What went wrong, in a few words, for the log line of a retry."""
    if standby(exc):
        return (
            f"no primary ({db.first_line(exc)}): a standby takes no writes; waiting for a "
            "primary (a failover in progress? a DSN naming a standby should list every "
            "host, with target_session_attrs=read-write)"
        )
    if pooler_error(exc):
        return (
            f"protocol error ({db.first_line(exc)}): a connection pooler in transaction "
            "mode between pgqueue and PostgreSQL? Use App(pooler='transaction'), "
            "PGQUEUE_POOLER=transaction or --pooler transaction"
        )
    if isinstance(exc, psycopg.errors.DiskFull):
        return f"database out of disk space ({db.first_line(exc)}): free space on its server"
    if lost(exc):
        return f"connection lost ({db.first_line(exc)})"
    return f"database unavailable ({db.first_line(exc)})"


def dead(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection is known to be dead without asking the server: closed,
    broken, or with something in its socket (see the module's docstring)."""
    if conn.closed or conn.broken:
        return True
    pgconn = conn.pgconn
    if pgconn.status != pq.ConnStatus.OK or pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return True
    try:
        fd = pgconn.socket
    except psycopg.OperationalError:
        return True
    return _readable(fd)


if sys.platform == "win32":  # no poll(): select() takes sockets there, whatever their number

    def _readable(fd: int) -> bool:
        ready, _, _ = select.select([fd], [], [], 0)
        return bool(ready)

else:

    def _readable(fd: int) -> bool:
        poller = select.poll()  # not select(): it fails on descriptors past 1023
        poller.register(fd, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
