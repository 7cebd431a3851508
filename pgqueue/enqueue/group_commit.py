"""Client-side group commit of single-run async enqueues (Enqueuer.insert_runs_async)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import psycopg

from pgqueue.enqueue.options import RunRow
from pgqueue.errors import RunNotFound
from pgqueue.runs.handle import RunHandle

if TYPE_CHECKING:
    from pgqueue.db.database import AsyncConn, Database

# Inserts rows with one statement now (Enqueuer.insert_now_async), here always on a
# pooled connection (None).
Write = Callable[[Sequence[RunRow], "AsyncConn | None"], Awaitable[list[RunHandle]]]


class GroupCommit:
    """Single-run enqueues of one event loop, without a connection of their own, written
    together (client-side group commit). A lone call, with no other run waiting or being
    written, is written by its caller's own task once the loop's current pass is over, if
    no other call came in that pass. Otherwise a flusher takes every run waiting, inserts
    them with one statement and one commit, and hands each caller its handle. Up to
    `pool_size` writers (the lone caller, flushers) run at once, and calls that arrive
    while they are busy share the next commit. A task that enqueues its follow-up (a
    chain, a fan-out) then pays a share of one commit instead of a whole one: the tasks
    one claim started enqueue in the same pass of the loop.

    Each caller's run is committed when its await returns. A caller cancelled while a
    flusher writes its run has it written all the same; a lone caller cancelled while it
    writes its own run cancels that write, as an enqueue on its own connection (conn=)
    would: it may or may not have been committed. One run that the server rejects (a
    DataError, an IntegrityError, a dependency that does not exist...) fails its own call
    only: the batch is written again one run at a time. A lost connection fails the whole
    batch."""

    def __init__(self, write: Write, database: Database, loop: asyncio.AbstractEventLoop) -> None:
        self.write = write
        self.database = database  # its pool_size: how many writers at once
        self.loop = loop
        self.waiting: list[tuple[RunRow, asyncio.Future[RunHandle]]] = []
        self.flushers: set[asyncio.Task[None]] = set()
        self.alone = 0  # lone callers writing their own run (0 or 1)
        self.gathering = False  # the lone caller waits for the loop's pass to end

    async def insert(self, row: RunRow) -> RunHandle:
        if not self.waiting and not self.flushers and not self.alone:
            # Written by this task: no flusher task and no future to hand the handle
            # over (bench/RESULTS.md, "Single enqueue"), unless other calls came in the
            # same pass of the loop (the tasks one claim started, each enqueuing its
            # follow-up): then a flusher writes them all with one commit.
            self.alone = 1
            self.gathering = True
            try:
                await asyncio.sleep(0)
                self.gathering = False
                if not self.waiting:
                    return (await self.write([row], None))[0]
                mine: asyncio.Future[RunHandle] = self.loop.create_future()
                self.waiting.insert(0, (row, mine))
            finally:
                self.gathering = False
                self.alone = 0
                self._start()  # the calls that came meanwhile, with this one's if they did
            return await mine
        future: asyncio.Future[RunHandle] = self.loop.create_future()
        self.waiting.append((row, future))
        if not self.gathering:  # (a gathering lone caller starts the flusher)
            self._start()
        return await future

    def _start(self) -> None:
        """A flusher for the runs waiting, if a writer's place is free."""
        if self.waiting and len(self.flushers) + self.alone < self.database.pool_size:
            task = self.loop.create_task(self._flush())
            self.flushers.add(task)
            task.add_done_callback(self.flushers.discard)

    async def _flush(self) -> None:
        while self.waiting:
            batch, self.waiting = self.waiting, []
            try:
                await self._write(batch)
            except BaseException as exc:  # cancelled with the loop: so are the callers
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                raise

    async def _write(self, batch: list[tuple[RunRow, asyncio.Future[RunHandle]]]) -> None:
        try:
            handles = await self.write([row for row, _ in batch], None)
        except (
            psycopg.DataError,
            psycopg.IntegrityError,
            psycopg.ProgrammingError,
            RunNotFound,  # a dependency (after=) that does not exist
        ) as exc:
            if len(batch) == 1:
                _settle(batch[0][1], exc)
            else:
                for one in batch:  # whose run was it? each alone
                    await self._write([one])
            return
        except Exception as exc:
            for _, future in batch:
                _settle(future, exc)
            return
        for (_, future), handle in zip(batch, handles, strict=True):
            _settle(future, handle)


def _settle(future: asyncio.Future[RunHandle], value: RunHandle | Exception) -> None:
    if future.done():  # the caller was cancelled; its run is written all the same
        return
    if isinstance(value, Exception):
        future.set_exception(value)
    else:
        future.set_result(value)
