"""The producer: the claim loop. It claims runs (one statement per queue and round, SKIP
LOCKED or pgqueue.claim_limited) into the executor's free slots, keeps each queue's claim
mark, and stops claiming once the worker stops or reaches a recycling limit (max_runs,
max_memory_mb).

An idle worker's pickup of a new run: the listener hears the enqueue's NOTIFY and, while
the claim loop has no claim on its way and slots are free (idle()), claims the queue's
runs itself (pick_up, on a connection of the pool) instead of waking the loop: one task
switch less between the NOTIFY and the run's start. Never on the listener's connection:
there a claim's rows would arrive behind every notification sent before them, which a
flood makes seconds, while their leases run. Both paths reserve slots the same way and
hand runs over the same way (_start): to Executor.start, one claimed row at a time."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Coroutine
from operator import attrgetter
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pgqueue.worker import semaphores
from pgqueue.worker._service import DB_ERRORS, Pool, outage, outage_delay
from pgqueue.worker.records import Claimed

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from pgqueue.worker._completer import Completer
    from pgqueue.worker.executor import Executor
    from pgqueue.worker.maintenance.lease_keeper import LeaseKeeper
    from pgqueue.worker.maintenance.queue_limits import QueueLimits

log = logging.getLogger("pgqueue.worker")

_CLAIM_ORDER = attrgetter("priority", "id")  # the order a claim's runs start in

CLAIM_BATCH_MIN = 50  # a claim is split (see Producer.claim_batch) only above this size
CLAIMS_IN_FLIGHT = 2  # claims a worker has on their way at once, at most
# how long after a rate limit's next slot opens to claim: the loop's timers may fire a
# little early (their clock's resolution), and a claim too early finds the slot taken
RATE_SLACK = 0.005


def rss_mb() -> float:
    """This process's resident set size in MiB: /proc/self/statm (one read) where there is
    one, else the peak RSS from getrusage."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


# One stager pass: runs made ready, and seconds until the next is due (Stager.stage)
Stage = Callable[[], Coroutine[Any, Any, tuple[int, float | None]]]


class Producer:
    """Claims runs of `queues` through `pool` for `executor`, at most `concurrency` held
    at once, and hands their leases to `lease_keeper`. It claims whenever `wake` is set (a
    slot freed, work may have arrived: the executor, the completer and the stager set
    it) and stops once `stop` is set (it sets it itself to recycle). `limits` says which
    queues claim through claim_limited; `completer` whether outcomes are still being
    written; `stage` is one stager pass (burst mode asks for one before it ends). Built
    on the event loop it claims on."""

    def __init__(
        self,
        executor: Executor,
        completer: Completer,
        lease_keeper: LeaseKeeper,
        pool: Pool,
        limits: QueueLimits,
        stage: Stage,
        wake: asyncio.Event,
        stop: asyncio.Event,
        worker_id: UUID,
        queues: list[str],
        concurrency: int,
        lease_seconds: float,
        poll_interval: float,
        stats: Counter[str],
        max_runs: int | None = None,
        max_memory_mb: float | None = None,
    ) -> None:
        self.executor = executor
        self.completer = completer
        self.lease_keeper = lease_keeper
        self.pool = pool
        self.limits = limits
        self.stage = stage
        self._wake = wake
        self._stop = stop
        self.held = executor.held
        self.worker_id = worker_id
        self.queues = queues
        self.concurrency = concurrency
        # Runs per claim at most. A large worker claims half its slots at a time, so that
        # the next claim is in flight while the runs of the last one start: the claim's
        # round trip and the worker's Python overlap instead of alternating. A small one
        # claims all its free slots at once: a claim of 5 costs nearly what a claim of 50
        # does, so halving it loses more than the overlap gains. Measured in
        # bench/RESULTS.md ("Decisions the measurements settled").
        self.claim_batch = max(min(concurrency, CLAIM_BATCH_MIN), -(-concurrency // 2))
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.stats = stats
        self.max_runs = max_runs
        self.max_memory_mb = max_memory_mb
        self._rss_checked = -1.0  # when _over_memory last read the RSS (monotonic)
        self.reserved = 0  # slots asked for by the claims in flight
        self.marks = semaphores.ClaimMarks()
        # enqueue-to-claim latency of the latest runs (bounded: a worker lives long)
        self.pickup_seconds: deque[float] = deque(maxlen=10_000)
        self._rate_timer: asyncio.TimerHandle | None = None  # see _wake_in
        self._flying = 0  # the claim loop's claims on their way
        self._burst = False
        self._picking = 0  # pick_up claims on their way
        self._picked = asyncio.Event()  # set while none is
        self._picked.set()

    def wake(self) -> None:
        """Look for work now (a slot freed, a run was enqueued or staged)."""
        self._wake.set()

    async def run(self, burst: bool) -> None:
        """Claim until the worker stops (or, with burst, until nothing is due)."""
        failures = 0
        start = 0
        settled = False
        full = True  # the last claim got all it asked for: its queue may hold more
        # Claims in flight. A second one starts while the first is on its way only for a
        # whole batch of free slots (not one claim per freed slot), and only while the
        # queues have more: the server works on one claim while this process starts the
        # runs of the other. In burst mode, one at a time (see the end condition below).
        depth = 1 if burst else CLAIMS_IN_FLIGHT
        self._burst = burst
        flying: set[asyncio.Task[tuple[int, bool]]] = set()
        try:
            while not self._stop.is_set():
                self._flying = len(flying)
                self._wake.clear()
                free = self.concurrency - len(self.held) - self.reserved
                if free > 0 and (
                    not flying or (len(flying) < depth and full and free >= self.claim_batch)
                ):
                    if self.max_memory_mb is not None and self._over_memory(self.max_memory_mb):
                        continue  # draining: the loop ends
                    flying.add(asyncio.create_task(self._claim_round(start)))
                    start = (start + 1) % len(self.queues)
                    continue
                if not flying:  # every slot is taken
                    await self._sleep(self.poll_interval, wake=True)
                    continue
                self._flying = len(flying)
                done, flying = await asyncio.wait(flying, return_when=asyncio.FIRST_COMPLETED)
                self._flying = len(flying)
                claimed, full, error = 0, False, None
                for claim in done:
                    try:
                        got, more = claim.result()
                    except Exception as exc:
                        error = exc
                    else:
                        claimed += got
                        full = full or more
                if error is not None:
                    failures += 1
                    full = True
                    if isinstance(error, DB_ERRORS):
                        delay = outage_delay("claim", error, failures)
                    else:
                        # A bug or an unexpected database error must not kill the worker
                        # and its running tasks: log it and try again later.
                        delay = min(30.0, 0.5 * 2**failures)
                        log.error("claim failed; retrying in %.1fs", delay, exc_info=error)
                    await self._sleep(delay)
                    continue
                failures = 0
                if flying:
                    continue  # decide when the other claim lands
                # Burst ends only when nothing is held and no outcome is still being
                # written (a limited queue refuses claims for permits about to come back),
                # and after one more empty claim that started once all of that was
                # settled: an earlier claim's snapshot may predate our last completion.
                if (
                    burst
                    and not claimed
                    and not self.held
                    and not self.executor.executing
                    and not self.completer.unwritten
                    and not self._rate_pending()  # runs are due, a rate limit holds them
                ):
                    try:
                        staged, _ = await self.stage()
                    except DB_ERRORS:
                        staged = 1
                    if not staged and settled:
                        return
                    settled = not staged
                    full = True
                    continue
                settled = False
                if full and len(self.held) < self.concurrency:
                    continue  # the queue may hold more
                full = True
                await self._sleep(self.poll_interval, wake=True)
        finally:
            self._flying = 0
            if flying:  # their runs are held now: shutdown.drain() sees them
                await asyncio.wait(flying)
            # a pick_up on its way, likewise (none starts once the worker stops)
            await self._picked.wait()

    def idle(self) -> bool:
        """Whether the listener may claim a notified queue's runs itself (pick_up): the
        worker is running (not stopping, not in burst mode), the claim loop has no claim
        on its way (it would take the runs, or decide what to claim next once it lands),
        and a slot is free."""
        return not self._stop.is_set() and not self._burst and not self._flying and self._free() > 0

    async def pick_up(self, queue: str) -> int:
        """Claim runs of `queue` into the free slots on a connection of the pool, and
        start them: the runs claimed. If the claim got all it asked for, the claim loop
        is woken for the rest. A database error is the caller's (it wakes the loop)."""
        if self._stop.is_set() or (
            self.max_memory_mb is not None and self._over_memory(self.max_memory_mb)
        ):
            return 0
        free = self._free()
        if free <= 0:
            return 0
        asked = min(free, self.claim_batch)
        self.reserved += asked
        self._picking += 1
        self._picked.clear()
        try:
            try:
                claimed = await self._claim(queue, asked)
            finally:
                self.reserved -= asked
        finally:
            self._picking -= 1
            if not self._picking:
                self._picked.set()
        self.stats["picked_up"] += claimed
        if claimed == asked:
            self.wake()  # the queue may hold more
        return claimed

    def _free(self) -> int:
        """Slots neither held nor asked for by a claim on its way (with max_runs: at most
        what is left of it, the claims on their way counting as what they asked for)."""
        free = self.concurrency - len(self.held) - self.reserved
        if self.max_runs is not None:
            free = min(free, self.max_runs - self.stats["claimed"] - self.reserved)
        return free

    async def _claim_round(self, start: int) -> tuple[int, bool]:
        """Claim into the free slots, queue after queue from `start`: (runs claimed, some
        claim got all it asked for)."""
        claimed, more = 0, False
        n = len(self.queues)
        for i in range(n):
            free = self._free()  # exactly max_runs: claims in flight count as they asked
            if free <= 0:
                break
            asked = min(free, self.claim_batch)
            self.reserved += asked
            try:
                got = await self._claim(self.queues[(start + i) % n], asked)
            finally:
                self.reserved -= asked
            claimed += got
            more = more or got == asked
        return claimed, more

    async def _sleep(self, seconds: float, wake: bool = False) -> None:
        waits = [asyncio.ensure_future(self._stop.wait())]
        if wake:
            waits.append(asyncio.ensure_future(self._wake.wait()))
        _, _pending = await asyncio.wait(
            waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
        )
        for p in waits:
            p.cancel()

    async def _claim(self, queue: str, limit: int) -> int:
        """Claim up to `limit` runs of `queue` on a connection of the pool, and start them."""
        async with self.pool.connection() as conn:
            rows = await self._fetch(conn, queue, limit)
        outage().succeeded("claim")  # here, not in run(): a round may not reach the database
        return self._start(rows)

    async def _fetch(self, conn: AsyncConnection[Any], queue: str, limit: int) -> list[Claimed]:
        """The claim of up to `limit` runs of `queue` on `conn`, its claim mark kept."""
        params = {
            "queue": queue,
            "limit": limit,
            "worker_id": self.worker_id,
            "lease_seconds": self.lease_seconds,
            # Runs whose outcome is still being written keep their permits until it
            # commits: the limit holds for valid leases as the database shows them.
            "finishing": [],
        }
        query = semaphores.claim_query(queue, self.limits.limited, self.limits.rate_only)
        marked = query != "claim_limited"
        if marked:
            params |= self.marks.start(queue)
        rows = await semaphores.claim(conn, queue, params, query)
        if len(rows) < limit and queue in self.limits.wakes:
            self._wake_in(await semaphores.rate_open_in(conn, queue))
        if marked:
            self.marks.landed(queue, rows)
        return rows

    def _start(self, rows: list[Claimed]) -> int:
        """Hand claimed `rows` to the lease keeper and, in claim order, to the executor:
        the runs claimed."""
        if rows:
            self.lease_keeper.add(rows)
        claimed = len(rows)
        self.stats["claimed"] += claimed
        rows.sort(key=_CLAIM_ORDER)
        start = self.executor.start
        pickup = self.pickup_seconds
        for row in rows:
            pickup.append(max(0.0, row.pickup_seconds))
            start(row)
        if self.max_runs is not None and self.stats["claimed"] >= self.max_runs:
            self._recycle(f"{self.max_runs} runs claimed (max_runs)")
        return claimed

    def _wake_in(self, seconds: float | None) -> None:
        """Claim again once a rate limit or a backoff lets a run start (rather than at the
        next poll, and without spinning before that): one timer, the earliest asked for."""
        if seconds is None:
            return
        loop = asyncio.get_running_loop()
        at = loop.time() + seconds + RATE_SLACK
        timer = self._rate_timer
        if timer is not None and not timer.cancelled() and loop.time() <= timer.when() <= at:
            return
        if timer is not None:
            timer.cancel()
        self._rate_timer = loop.call_at(at, self.wake)

    def _rate_pending(self) -> bool:
        """Whether a rate limit's next slot is still to open (the timer of _wake_in)."""
        timer = self._rate_timer
        return (
            timer is not None
            and not timer.cancelled()
            and timer.when() > asyncio.get_running_loop().time()
        )

    # -- recycling --------------------------------------------------------------------

    def _over_memory(self, limit: float) -> bool:
        """Whether RSS exceeds `limit`, max_memory_mb (then drain), asked before each claim: the
        moment it matters, since a draining worker only stops claiming. Read at most ten
        times a second (a read of /proc is some microseconds)."""
        now = time.monotonic()
        if now - self._rss_checked < 0.1:
            return False
        self._rss_checked = now
        rss = rss_mb()
        if rss <= limit:
            return False
        self._recycle(f"RSS {rss:.0f} MiB over max_memory_mb {limit:g}")
        return True

    def _recycle(self, why: str) -> None:
        """Drain and stop, as on SIGTERM: a supervisor starts a fresh process."""
        if not self._stop.is_set():
            log.info("%s: draining to exit (recycling)", why)
            self._stop.set()
