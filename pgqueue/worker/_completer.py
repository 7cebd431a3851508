"""Writes the outcomes of attempts in batches: one statement for everything that finished
while the previous write was in flight."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias
from uuid import UUID

from pgqueue.db import sql as _sql
from pgqueue.states import RunState
from pgqueue.worker._service import DB_ERRORS, Pool, outage_delay, reached
from pgqueue.worker.records import Held, Outcome

log = logging.getLogger("pgqueue.worker")

# Per-run code: the states as plain strings bound once, so that testing an outcome's
# state adds no attribute lookup and keeps the interpreter's fast str paths.
SUCCEEDED = RunState.SUCCEEDED.value
DEFERRED = (RunState.SCHEDULED.value, RunState.WAITING.value)  # states with a delay


# Told, once an outcome is written (True) or fenced out (False): a future someone awaits,
# or the attempt's Held, for the completer's `written` (no future, no task to wake, no
# callback made per run: the hot path of a run nobody waits for).
Settle: TypeAlias = "asyncio.Future[bool] | Held"


class Completer:
    """Writes outcomes for worker `worker_id` through `pool`, fenced by lease: an outcome
    whose lease is no longer valid is not written. After each batch, `wrote()` is called
    (permits came back: a claim may find room), and `written(held, outcome, written)` for
    each outcome handed in with post().

    A write that fails is tried again until it lands: at once if it lost its connection,
    then with backoff, but never waiting longer than a third of what `lease_left()` says
    is left of the leases (the lease keeper's: an outcome's lease is no longer renewed
    once it is handed in), so that tries go on landing until the leases would expire."""

    RETRY_MIN = 0.02  # seconds between two tries at least, once a fresh connection failed

    def __init__(
        self,
        pool: Pool,
        worker_id: UUID,
        written: Callable[[Held, Outcome, bool], None],
        wrote: Callable[[], None],
        lease_left: Callable[[], float] | None = None,
        deferred: Callable[[], None] | None = None,
    ) -> None:
        self.pool = pool
        self.lease_left = lease_left
        self.worker_id = worker_id
        self.written = written
        self.wrote = wrote
        self._pending: list[tuple[Outcome, Settle]] = []
        self._writing: list[tuple[Outcome, Settle]] = []  # the batch on its way
        self._ready = asyncio.Event()
        self.unwritten = 0  # outcomes handed in and not settled yet
        self._settled = asyncio.Event()  # set whenever unwritten is 0
        self._settled.set()
        # told after a batch that made runs scheduled or waiting (a durable sleep, a
        # backoff, a wait with a deadline): the stager looks at its next due time again
        self.deferred = deferred
        self._deferred_pending = False

    async def submit(self, outcome: Outcome) -> bool:
        """Queue the outcome for the next batch; True once written, False if fenced out."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._add(outcome, future)
        return await future

    def post(self, outcome: Outcome, held: Held) -> None:
        """Queue the outcome of `held`'s attempt for the next batch; written(held,
        outcome, written) once settled."""
        self._add(outcome, held)

    def _add(self, outcome: Outcome, settle: Settle) -> None:
        if outcome.state in DEFERRED:
            self._deferred_pending = True
        self._pending.append((outcome, settle))
        self.unwritten += 1
        self._settled.clear()
        self._ready.set()

    def leases(self) -> list[tuple[int, str]]:
        """On the loop: the leases of the outcomes handed in and not settled yet. Their
        runs are still this worker's until the write lands, so the lease keeper renews
        them as it does the running ones: a loop blocked (by task code) before the write
        would otherwise let them expire, and a run that succeeded would run again."""
        return [(o.id, o.lease_token) for o, _ in (*self._writing, *self._pending)]

    async def settled(self) -> None:
        """Return once every outcome handed in so far is written or fenced out."""
        await self._settled.wait()

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            deferred, self._deferred_pending = self._deferred_pending, False
            self._writing = batch
            try:
                ids = await self._write_with_retry([o for o, _ in batch])
            finally:
                self._writing = []
            # Runs that left `running` gave their permits back: a claim of a limited
            # queue that found no room a moment ago may find some now.
            self.wrote()
            if deferred and self.deferred is not None:
                self.deferred()
            tell = self.written
            for outcome, settle in batch:
                done = outcome.id in ids
                if isinstance(settle, asyncio.Future):
                    if not settle.done():
                        settle.set_result(done)
                else:
                    try:
                        tell(settle, outcome, done)
                    except Exception:
                        log.exception("run %s: internal error after its write", outcome.id)
            self.unwritten -= len(batch)
            if not self.unwritten:
                self._settled.set()

    async def _write_with_retry(self, outcomes: list[Outcome]) -> set[int]:
        failures = 0
        while True:
            try:
                ids = await self._write(outcomes)
            except DB_ERRORS as exc:
                # Keep the outcomes: they are written when the database is back, unless
                # the leases expired meanwhile (then the fence rejects them and the runs
                # are rescued: at-least-once).
                failures += 1
                delay = outage_delay("completer", exc, failures)
                left = self.lease_left() if self.lease_left is not None else 0.0
                if left > 0:
                    delay = min(delay, max(self.RETRY_MIN, left / 3))
                await asyncio.sleep(delay)
            else:
                reached("completer", failures)
                return ids

    async def _write(self, outcomes: list[Outcome]) -> set[int]:
        params = complete_params(outcomes, self.worker_id)
        backoffs = [o for o in outcomes if o.backoff is not None]
        async with self.pool.connection() as conn:
            if not backoffs:
                cur = await conn.execute(_sql.query("complete"), params)
                return {row[0] for row in await cur.fetchall()}
            # RetryAfter(scope="group" | "queue"): the backoffs of the runs written, in
            # the transaction that writes them (back_off.sql)
            async with conn.transaction():
                cur = await conn.execute(_sql.query("complete"), params)
                written = {row[0] for row in await cur.fetchall()}
                await conn.execute(_sql.query("back_off"), back_off_params(backoffs, written))
            return written


def complete_params(outcomes: Iterable[Outcome], worker_id: UUID) -> dict[str, Any]:
    """complete.sql's parameters for a batch of outcomes written by worker `worker_id`.

    Plain successes (nothing but a result) take the statement's hot path: their ids as
    one array literal and two JSON objects keyed by id, the lease tokens and the results
    other than JSON null. Everything else goes in one JSON document (`document`)."""
    ids: list[str] = []
    tokens: list[str] = []
    results: list[str] = []
    others: list[Outcome] = []
    succeeded = SUCCEEDED  # a local: the test below runs once per outcome
    for o in outcomes:
        result = o.result
        if (
            o.state == succeeded
            and result is not None
            and o.error is None
            and not o.refund
            and o.error_kind is None
            and o.traceback is None
            and o.wait_event is None
            and o.wait_key is None
            and o.wait_since is None
            and o.wait_run_id is None
        ):
            key = str(o.id)
            ids.append(key)
            tokens.append(f'"{key}":"{o.lease_token}"')
            if result != "null":
                results.append(f'"{key}":{result}')
        else:
            others.append(o)
    return {
        "succeeded": "{" + ",".join(ids) + "}",
        "tokens": "{" + ",".join(tokens) + "}",
        "results": "{" + ",".join(results) + "}",
        "outcomes": document(others),
        "worker_id": worker_id,
    }


def back_off_params(backoffs: Iterable[Outcome], written: set[int]) -> dict[str, Any]:
    """back_off.sql's parameters: the runs written whose outcome backs off their group
    or queue, and the scope of each."""
    done = [o for o in backoffs if o.id in written]
    return {"ids": [o.id for o in done], "scopes": [o.backoff for o in done]}


_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode


def document(outcomes: Iterable[Outcome]) -> str:
    """The outcomes as one JSON array of objects for complete.sql (jsonb_to_recordset):
    one text parameter instead of 13 arrays, which psycopg dumps element by element.
    `result` is already JSON text and goes in as is, wrapped in a one-element array."""
    parts = []
    for o in outcomes:
        fields: dict[str, Any] = {
            "id": int(o.id),
            "lease_token": o.lease_token,
            "state": o.state,
            "refund": bool(o.refund),
        }
        if o.state in DEFERRED and o.delay is not None:
            # None: no deadline. An infinite delay (RetryAfter(math.inf)) means the same;
            # sent as a number, it would make the statement fail for the whole batch.
            fields["delay"] = float(o.delay) if math.isfinite(o.delay) else None
        for name in ("error", "error_kind", "traceback", "wait_event", "wait_key"):
            value = getattr(o, name)
            if value is not None:
                fields[name] = _text(value)
        if o.wait_since is not None:
            fields["wait_since"] = o.wait_since.isoformat()
        if o.wait_run_id is not None:
            fields["wait_run_id"] = int(o.wait_run_id)
        if o.wake_at is not None:
            fields["wake_at"] = o.wake_at.isoformat()
        text = _encode(fields)
        if o.result is not None:
            text = f'{text[:-1]},"result":[{o.result}]}}'
        parts.append(text)
    return "[" + ",".join(parts) + "]"


def _text(value: str) -> str:
    """`value` as PostgreSQL text accepts it: no NUL, no lone surrogate (an error message
    may hold either; one bad row must not fail the batch)."""
    value = str(value)
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    try:
        value.encode()
    except UnicodeEncodeError:
        value = value.encode(errors="replace").decode()
    return value
