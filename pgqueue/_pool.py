"""Opening the App's connection pool (App._get_pool owns it: one per process)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from pgqueue import db


def open_pool(dsn: str, size: int) -> ConnectionPool[psycopg.Connection[Any]]:
    """An open pool on `dsn`, after one plain connection has failed fast, in one line, on a
    bad DSN or server."""
    db.connect(dsn).close()
    pool = ConnectionPool(dsn, name="pgqueue", **db.app_pool_options(size))
    # With its first connection ready: a request made while that is still being opened
    # grows the pool by one, and psycopg_pool hands out its connections in turn, so a
    # caller enqueueing one run at a time would then alternate between two backends for
    # good, about 80 us slower per call (bench/RESULTS.md).
    pool.open(wait=True, timeout=db.POOL_TIMEOUT)  # closes itself on timeout
    return pool
