"""The indexes that make a dashboard filter exact at any depth, built on request
(`pgqueue runs search-index --by ...`) rather than by a migration: every enqueue and
claim writes their entries, a cost the hot path does not pay unless an operator asks
(bench/RESULTS.md, "The indexes of the lists at any depth"). Without one, its filter
reads a bounded window of runs a page (docs/dashboard.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from pgqueue.db import sql as _sql


@dataclass(frozen=True, slots=True)
class SearchIndex:
    name: str  # qualified
    filter: str  # what it serves, in words
    create: str  # sql/ query names
    drop: str


SEARCH_INDEXES = {
    "arguments": SearchIndex(
        "pgqueue.runs_args_idx", "argument filter", "args_index_create", "args_index_drop"
    ),
    "task": SearchIndex(
        "pgqueue.runs_live_task_idx",
        "list of one task's unfinished runs",
        "task_index_create",
        "task_index_drop",
    ),
}


def ready(conn: psycopg.Connection[Any], kind: str) -> bool:
    """Whether the index `kind` (a key of SEARCH_INDEXES) exists and is usable: a build
    that failed or is still going leaves it invalid or not ready."""
    row = conn.execute(_sql.query("index_ready"), {"index": SEARCH_INDEXES[kind].name})
    found = row.fetchone()
    return bool(found and found[0])
