"""The enqueue engine without its I/O, shared by Enqueuer.insert_runs and its async twin: which
statement inserts the rows, the lookup of idempotency keys that were already taken, and
how the answers become RunHandles. Every statement reads the runs in the one encoding of
pgqueue.enqueue.encoding, through one SQL part (sql/parts/enqueue_run_fields.sql); they
differ only where a measurement said so:

- one run: sql/enqueue_run_plain.sql when it is due now and has none of the rarer options
  (nearly every enqueue()), else sql/enqueue_run.sql (its ON CONFLICT costs nothing on one
  row). Both answer a row per run inserted, not the batch statements' aggregated row;
- several runs: one JSON document, sql/enqueue_runs.sql, or sql/enqueue_runs_keyed.sql when
  some run has an idempotency key (ON CONFLICT makes every row a speculative insertion,
  about 9% of the server's time per row, so batches without keys go without it);
- an enqueue_many batch (RunBatch): sql/enqueue_runs_plain.sql, what its runs share
  encoded once;
- runs with a unique key: sql/enqueue_unique.sql, a call of pgqueue.enqueue_unique()
  (sql/functions/), which loops per run over the cases of a key in scope.
Every statement but enqueue_run_plain.sql takes `batch_id`: the app.batch() the runs join
(pgqueue.batches), or NULL, and `headers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, LiteralString

import psycopg

from pgqueue.db import sql as _sql
from pgqueue.enqueue.encoding import document, encode, plain
from pgqueue.enqueue.options import RunBatch, RunRow
from pgqueue.errors import RunNotFound
from pgqueue.runs.handle import RunHandle

if TYPE_CHECKING:
    from pgqueue.db.database import Database

Found = Sequence[Any] | None  # (ids, keys) of the runs inserted, see Insert.found
Existing = Sequence[Sequence[Any]]  # runs_by_idempotency_key.sql's (id, key) rows


def _ids_keys(found: Found) -> tuple[list[int], list[str | None]]:
    """The inserted runs' ids and keys, in id order (NULL arrays: nothing was inserted)."""
    if found is None or found[0] is None:
        return [], []
    return found[0], found[1]


class Insert:
    """One insert_runs call: run `query` with `params` and fetch its one row, `found(row)`,
    then `lookup(found)` if it returns a statement (keys that other runs held), then
    `handles(found, existing)`."""

    def __init__(
        self,
        database: Database,
        rows: Sequence[RunRow],
        headers: str | None = None,
        batch_id: int | None = None,
    ) -> None:
        self.database = database
        self.rows = rows
        many = isinstance(rows, RunBatch)
        self.unique = not many and any(r.unique_key is not None for r in rows)
        self.keyed = (
            not many and not self.unique and any(r.idempotency_key is not None for r in rows)
        )
        # a single-run statement: a row per run inserted (none for a key that was taken)
        self.one = not many and not self.unique and len(rows) == 1
        bare = self.one and headers is None and batch_id is None and plain(rows[0])
        self.query, self.params = _statement(rows, self.unique, self.keyed, bare)
        self.params["notify"] = database.notify
        if not bare:
            self.params["batch_id"] = batch_id
            # the runs' pgqueue.runs.headers (JSON text): the enqueue span's trace context
            # when the app is traced (pgqueue.contrib.otel), else NULL
            self.params["headers"] = headers

    def found(self, row: Sequence[Any] | None) -> Found:
        """The statement's answer as (ids, keys), or for enqueue_unique.sql (ids,
        created): the single-run statements' row (id, key, _) or none, the others' one
        row (ids, keys, notified)."""
        if self.one:
            return ([], []) if row is None else ([row[0]], [row[1]])
        return row

    def lookup(self, found: Found) -> tuple[LiteralString, dict[str, Any]] | None:
        """The query for the runs that already held a key (the insert skipped them)."""
        if not self.keyed:
            return None
        created = {key for key in _ids_keys(found)[1] if key is not None}
        missing = [
            r.idempotency_key
            for r in self.rows
            if r.idempotency_key is not None and r.idempotency_key not in created
        ]
        if not missing:
            return None
        return _sql.query("runs_by_idempotency_key"), {"keys": missing}

    def handles(self, found: Found, existing: Existing = ()) -> list[RunHandle]:
        """A handle per row, in order. `found` holds the ids in id order, and the ids of a
        statement's rows follow the rows' order. A run whose key was taken (by an earlier
        run, or by an earlier row of this batch) gets the holder's id and created=False."""
        database = self.database
        if self.unique:
            assert found is not None
            return [
                RunHandle(run_id, database, created=created)
                for run_id, created in zip(found[0], found[1], strict=True)
            ]
        ids, keys = _ids_keys(found)
        if not self.keyed:
            return RunHandle.many(ids, database)
        pairs = list(zip(ids, keys, strict=True))
        by_key = {key: run_id for run_id, key in pairs if key is not None}
        by_key.update({key: run_id for run_id, key in existing})
        fresh = iter(run_id for run_id, key in pairs if key is None)
        created_keys = {key for _, key in pairs if key is not None}
        out = []
        for r in self.rows:
            if r.idempotency_key is None:
                out.append(RunHandle(next(fresh), database))
            else:
                created = r.idempotency_key in created_keys
                created_keys.discard(r.idempotency_key)
                out.append(RunHandle(by_key[r.idempotency_key], database, created=created))
        return out


def dependency_error(exc: psycopg.errors.ForeignKeyViolation) -> Exception:
    """The error to raise for the insert's ForeignKeyViolation: RunNotFound when a run a
    dependency names does not exist (the trigger's constraint name runs_after_exists,
    pgqueue.runs_enqueue_after()), else the error itself."""
    if exc.diag.constraint_name == "runs_after_exists":
        message = (exc.diag.message_primary or str(exc)).removeprefix("pgqueue: ")
        return RunNotFound(message)
    return exc


def _statement(
    rows: Sequence[RunRow], unique: bool, keyed: bool, bare: bool
) -> tuple[LiteralString, dict[str, Any]]:
    """The statement that inserts `rows`, and its runs' parameters (their encoding)."""
    if isinstance(rows, RunBatch):
        # what its runs share, once; the document carries [args, kwargs(, group)] per run
        return _sql.query("enqueue_runs_plain"), {
            "runs": rows.document,
            "shared": encode(rows.shared),
            "grouped": not rows.plain,
        }
    if len(rows) == 1 and not unique:
        name: LiteralString = "enqueue_run_plain" if bare else "enqueue_run"
        return _sql.query(name), {"run": encode(rows[0])}
    name = "enqueue_unique" if unique else "enqueue_runs_keyed" if keyed else "enqueue_runs"
    return _sql.query(name), {"runs": document(rows)}
