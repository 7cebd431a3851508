"""How the worker talks to the database: its connection pool, the settings of its
connections, and the JSON loader they decode args and kwargs with."""

from __future__ import annotations

import json
import json.scanner
import logging
from typing import Any, cast
from uuid import UUID

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import make_conninfo
from psycopg.types.json import set_json_loads

from pgqueue.db import connect as db
from pgqueue.db.pool import AsyncCheckedPool
from pgqueue.worker._service import WORKER_POOL_PREFIX

log = logging.getLogger("pgqueue.worker")

# The worker's statements are prepared (psycopg prepares a statement on its fifth run)
# and written for generic plans: tests/sql/test_explain.py checks each under this setting.
# Left to choose, the server re-plans the claim on every call (a LIMIT parameter makes the
# generic plan look 100x dearer than a custom one): about a tenth of the server's time per
# run, measured in bench/RESULTS.md. It is given as a startup parameter of the worker's
# own connections, never with SET: a SET stays on the server connection after the
# statement, where a pooler in transaction mode would hand it to its other clients. A
# startup parameter ends with the connection, and a pooler does not forward it.
GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan"


def worker_dsn(dsn: str, pooler: str | None) -> str:
    """The DSN of the worker's pool, lease keeper and listener: `dsn` with search_path
    pinned (pgqueue.db.PIN_SEARCH_PATH) and generic plans asked for at startup when no
    pooler sits in between. A server (or an undeclared pooler) that refuses the startup
    parameter gets the plain DSN, with a warning, and the role's search_path is checked
    as through a declared pooler."""
    if pooler is not None:
        return dsn
    tuned = make_conninfo(dsn, options=db.startup_options(dsn, db.PIN_SEARCH_PATH, GENERIC_PLANS))
    try:
        psycopg.connect(tuned, autocommit=True).close()
    except psycopg.OperationalError as exc:
        if not db.refuses_startup_options(exc):
            raise db.cannot_connect(dsn, exc) from None
        log.warning(
            "the server refused the startup parameter options (%s): a connection pooler? "
            "Start the worker with --pooler session or --pooler transaction",
            db.first_line(exc),
        )
        db.connect(dsn, pooler="session").close()  # warns if search_path is not pinned
        return dsn
    return tuned


def open_pool(dsn: str, worker_id: UUID, pooler: str | None) -> AsyncCheckedPool:
    """The worker's pool (not opened yet) on `dsn` (a worker_dsn), shared by the claims,
    the completer and the duties on the event loop."""
    return AsyncCheckedPool(
        dsn,
        min_size=2,
        max_size=4,
        kwargs=db.connect_kwargs(pooler),
        timeout=5,
        reconnect_timeout=db.RECONNECT_TIMEOUT,
        open=False,
        name=f"{WORKER_POOL_PREFIX}{worker_id.hex[:8]}",
        configure=configure_connection,
    )


_decoder = json.JSONDecoder()
_decode_json = _decoder.decode
_scan_json = json.scanner.make_scanner(cast(Any, _decoder))  # what decode() calls


class Undecodable:
    """What loads_json gives for a document it cannot decode (too deep for Python's
    decoder, not JSON), instead of raising: psycopg decodes a claim's rows all at once,
    after the claim committed, and one bad document must not orphan the whole batch.
    The executor fails the runs that hold one (attempt.undecodable)."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def loads_json(data: str | bytes) -> Any:
    """json.loads for the worker's connections, with the common empty kwargs and args
    made without a parse (a claim loads two documents per run). Other documents go
    straight to the decoder's scanner, as jsonb's text has no whitespace around the
    value (0.3 us against 0.7 for JSONDecoder.decode per document); anything
    else takes the full decode, for its error message. Never raises: see Undecodable."""
    if data == b"{}":
        return {}
    if data == b"[]":
        return []
    try:
        text = data if isinstance(data, str) else data.decode()
        try:
            value, end = _scan_json(text, 0)
        except StopIteration:
            end = -1
        if end != len(text):
            return _decode_json(text)
    except RecursionError as exc:
        return Undecodable(f"nested deeper than Python's JSON decoder can go ({exc})")
    except ValueError as exc:
        return Undecodable(f"not JSON ({exc})")
    return value


async def configure_connection(conn: AsyncConnection[Any]) -> None:
    set_json_loads(loads_json, conn)
