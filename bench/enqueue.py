"""Single enqueues, one transaction each, against the floor and against pgqueuer.

    python -m bench.enqueue --repeat 5 --n 1000

Per repeat, in a shuffled order, --n jobs enqueued one call (one transaction) at a time by:

- `bare sync` / `bare async`: one psycopg connection (sync / AsyncConnection) in autocommit
  sending the least a queue's enqueue must send: one statement that inserts a run into
  `pgqueue.runs` and calls pg_notify, committed on its own. It is the floor: one round trip
  and one commit flush, no pool, no row building;
- `pgqueue sync`: `Task.enqueue(i)` (the README's API: the App's pool);
- `pgqueue async`: `await Task.enqueue_async(i)`, one at a time from one coroutine;
- `pgqueuer async`: `await Queries.enqueue("cmp.noop", payload)` on its asyncpg driver, as
  bench.compare drives it.

Each side gets 20 warm-up calls. The figures are jobs/s per repeat and their medians, and
the ratios of medians (pgqueue / bare of the same kind, pgqueue async / pgqueuer): the
machine is shared, so only what is measured in one run, interleaved, is compared.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from bench.common import DEFAULT_SERVER
from bench.compare import PgqueueLib, PgqueuerLib, pgq_app, pgq_noop

BARE = (
    "WITH r AS (INSERT INTO pgqueue.runs (task, queue, args) VALUES ('bare.noop', 'bare', %s)"
    " RETURNING id) SELECT pg_notify('pgqueue_queued', 'bare') FROM r"
)
SIDES = ("bare sync", "pgqueue sync", "bare async", "pgqueue async", "pgqueuer async")


def _rate(n: int, fn: Callable[[int], object]) -> float:
    for i in range(20):
        fn(i)
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - t0)


def _arate(loop: asyncio.AbstractEventLoop, n: int, fn: Callable[[int], Awaitable[Any]]) -> float:
    async def go() -> float:
        for i in range(20):
            await fn(i)
        t0 = time.perf_counter()
        for i in range(n):
            await fn(i)
        return n / (time.perf_counter() - t0)

    return loop.run_until_complete(go())


def one_repeat(server: str, n: int, order: list[str], out: dict[str, list[float]]) -> None:
    pgq = PgqueueLib("enqueue_pgqueue", server)  # its own databases
    pgq.fresh()
    peer = PgqueuerLib("enqueue_pgqueuer", server) if "pgqueuer async" in order else None
    if peer is not None:
        peer.fresh()
    loop = asyncio.new_event_loop()
    if peer is not None:
        loop.run_until_complete(peer.aopen())  # its connection, on this loop
    try:
        with psycopg.connect(pgq.dsn, autocommit=True) as conn:
            aconn = loop.run_until_complete(
                psycopg.AsyncConnection.connect(pgq.dsn, autocommit=True)
            )
            for side in order:
                if side == "bare sync":
                    rate = _rate(n, lambda i: conn.execute(BARE, (f"[{i}]",)).fetchone())
                elif side == "pgqueue sync":
                    rate = _rate(n, pgq_noop.enqueue)
                elif side == "bare async":

                    async def bare(i: int) -> None:
                        await (await aconn.execute(BARE, (f"[{i}]",))).fetchone()

                    rate = _arate(loop, n, bare)
                elif side == "pgqueue async":
                    rate = _arate(loop, n, pgq_noop.enqueue_async)
                else:
                    assert peer is not None

                    def enqueue(i: int, queries: Any = peer.queries) -> Awaitable[Any]:
                        return queries.enqueue("cmp.noop", str(i).encode())  # type: ignore[no-any-return]

                    rate = _arate(loop, n, enqueue)
                out[side].append(rate)
                print(f"  {side}: {rate:,.0f} jobs/s", flush=True)
            loop.run_until_complete(aconn.close())
            loop.run_until_complete(pgq_app.aclose())
            if peer is not None:
                loop.run_until_complete(peer.aclose())
    finally:
        loop.close()
        pgq.close()
        pgq.drop()
        if peer is not None:
            peer.close()
            peer.drop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--n", type=int, default=1000, help="single enqueues timed per side")
    p.add_argument("--server", default=DEFAULT_SERVER)
    p.add_argument("--no-pgqueuer", action="store_true", help="leave pgqueuer out")
    args = p.parse_args(argv)
    sides = [s for s in SIDES if not (args.no_pgqueuer and s.startswith("pgqueuer"))]
    out: dict[str, list[float]] = {s: [] for s in sides}
    for r in range(args.repeat):
        order = list(sides)
        random.Random(r).shuffle(order)
        print(f"repeat {r + 1}: {', '.join(order)}", flush=True)
        one_repeat(args.server, args.n, order, out)
    med = {s: statistics.median(v) for s, v in out.items()}
    print("\n| side | jobs/s, median | runs |\n| --- | --- | --- |")
    for s in sides:
        runs = ", ".join(f"{v:,.0f}" for v in out[s])
        print(f"| {s} | {med[s]:,.0f} | {runs} |")
    print(f"\npgqueue sync / bare sync: {med['pgqueue sync'] / med['bare sync']:.2f}")
    print(f"pgqueue async / bare async: {med['pgqueue async'] / med['bare async']:.2f}")
    if "pgqueuer async" in med:
        print(f"pgqueue async / pgqueuer async: {med['pgqueue async'] / med['pgqueuer async']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
