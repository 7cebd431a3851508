"""The claim statements' row factory: claim.sql's and claim_limited.sql's rows as
records.Claimed."""

from __future__ import annotations

import functools
from typing import Any

from psycopg.rows import RowMaker

from pgqueue.worker.records import Claimed

_make = functools.partial(tuple.__new__, Claimed)


def claimed_row(cursor: Any) -> RowMaker[Claimed]:
    """psycopg row factory for the claim statements (fails loudly if their columns and
    Claimed drift apart)."""
    names = tuple(c.name for c in cursor.description or ())
    if names and names != Claimed._fields:
        raise RuntimeError(f"claim returned columns {names}, expected {Claimed._fields}")
    return _make  # type: ignore[return-value]
