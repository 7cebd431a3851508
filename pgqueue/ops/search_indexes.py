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
    names: tuple[str, ...]  # qualified
    filter: str  # what it serves, in words
    create: tuple[str, ...]  # sql/ query names, one per index
    drop: tuple[str, ...]


SEARCH_INDEXES = {
    "arguments": SearchIndex(
        ("pgqueue.runs_args_idx",), "argument filter", ("args_index_create",), ("args_index_drop",)
    ),
    # one task's runs: its unfinished ones by state, its finished ones by finish time
    "task": SearchIndex(
        ("pgqueue.runs_live_task_idx", "pgqueue.runs_finished_task_idx"),
        "lists of one task's runs",
        ("task_index_create", "task_finished_index_create"),
        ("task_index_drop", "task_finished_index_drop"),
    ),
    # one group's runs in any queue, likewise (a limited queue's groups have their own
    # indexes, built by the migrations: the claim reads them)
    "group": SearchIndex(
        ("pgqueue.runs_live_group_idx", "pgqueue.runs_finished_group_idx"),
        "lists of one group's runs",
        ("group_index_create", "group_finished_index_create"),
        ("group_index_drop", "group_finished_index_drop"),
    ),
}


def ready(conn: psycopg.Connection[Any], kind: str) -> bool:
    """Whether the indexes of `kind` (a key of SEARCH_INDEXES) exist and are usable: a
    build that failed or is still going leaves one invalid or not ready."""
    for name in SEARCH_INDEXES[kind].names:
        found = conn.execute(_sql.query("index_ready"), {"index": name}).fetchone()
        if not (found and found[0]):
            return False
    return True


def build(conn: psycopg.Connection[Any], kind: str) -> None:
    """Build the indexes of `kind` (CONCURRENTLY: `conn` in autocommit), each again
    from scratch unless it is ready: a failed build leaves an invalid index, which the
    create's IF NOT EXISTS would keep."""
    index = SEARCH_INDEXES[kind]
    for name, create, drop in zip(index.names, index.create, index.drop, strict=True):
        found = conn.execute(_sql.query("index_ready"), {"index": name}).fetchone()
        if not (found and found[0]):
            conn.execute(_sql.query(drop))
            conn.execute(_sql.query(create))


def drop(conn: psycopg.Connection[Any], kind: str) -> None:
    """Drop the indexes of `kind` (CONCURRENTLY: `conn` in autocommit)."""
    for query in SEARCH_INDEXES[kind].drop:
        conn.execute(_sql.query(query))
