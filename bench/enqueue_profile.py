"""Where a single enqueue's time goes, part by part (the profile behind bench/RESULTS.md's
"Single enqueue"):

    python -m bench.enqueue_profile

- the pure-Python parts of `Task.enqueue`, with timeit (best of 5 x 20,000): building and
  checking the row (`Task.make_row`), choosing the statement and its parameters
  (`pgqueue.enqueue.inserts.Insert`), making the handle;
- bench.enqueue's bare statement and `Task.enqueue`'s (enqueue_run_plain.sql), 2,000 times
  each inside one transaction (a round trip and the execution, no commit flush) and 1,000
  times each in autocommit (plus the flush), with wall and client CPU (process_time) per
  call;
- three rounds of bench.enqueue's four psycopg sides back to back (1,000 calls each, in
  the same process): wall and client CPU (process_time) per call;
- cProfile of 2,000 `Task.enqueue` and 2,000 `await Task.enqueue_async` calls.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import time
import timeit
from typing import Any

import psycopg

from bench.common import DEFAULT_SERVER
from bench.compare import PgqueueLib, pgq_app, pgq_noop
from bench.enqueue import BARE
from pgqueue.enqueue import inserts as _inserts
from pgqueue.tasks.task import NO_OPTIONS


def _us(stmt: str, scope: dict[str, Any], n: int = 20000) -> float:
    return min(timeit.repeat(stmt, number=n, repeat=5, globals=scope)) / n * 1e6


def _statements(dsn: str, op: _inserts.Insert) -> None:
    sides: list[tuple[str, Any, Any]] = [
        ("bare stmt", BARE, ("[1]",)),
        ("pgqueue stmt", op.query, op.params),
    ]
    for autocommit, n in ((False, 2000), (True, 1000)):
        with psycopg.connect(dsn, autocommit=autocommit) as conn:
            for name, query, params in sides:
                for _ in range(50):
                    conn.execute(query, params).fetchone()
                c0, t0 = time.process_time(), time.perf_counter()
                for _ in range(n):
                    conn.execute(query, params).fetchone()
                wall = (time.perf_counter() - t0) / n * 1e6
                cpu = (time.process_time() - c0) / n * 1e6
                how = "autocommit" if autocommit else "in a transaction"
                print(f"{name:15s} {how}: wall {wall:6.1f} us, cpu {cpu:6.1f} us")
            if not autocommit:
                conn.rollback()


def _rounds(dsn: str, rounds: int = 3, n: int = 1000) -> None:
    loop = asyncio.new_event_loop()
    conn = psycopg.connect(dsn, autocommit=True)
    aconn = loop.run_until_complete(psycopg.AsyncConnection.connect(dsn, autocommit=True))

    def sync(fn: Any) -> tuple[float, float]:
        for i in range(50):
            fn(i)
        c0, t0 = time.process_time(), time.perf_counter()
        for i in range(n):
            fn(i)
        return (time.perf_counter() - t0) / n * 1e6, (time.process_time() - c0) / n * 1e6

    def in_loop(fn: Any) -> tuple[float, float]:
        async def go() -> tuple[float, float]:
            for i in range(50):
                await fn(i)
            c0, t0 = time.process_time(), time.perf_counter()
            for i in range(n):
                await fn(i)
            return (time.perf_counter() - t0) / n * 1e6, (time.process_time() - c0) / n * 1e6

        return loop.run_until_complete(go())

    async def bare_async(i: int) -> None:
        await (await aconn.execute(BARE, (f"[{i}]",))).fetchone()

    try:
        for r in range(rounds):
            for name, (wall, cpu) in (
                ("bare sync", sync(lambda i: conn.execute(BARE, (f"[{i}]",)).fetchone())),
                ("pgqueue sync", sync(pgq_noop.enqueue)),
                ("bare async", in_loop(bare_async)),
                ("pgqueue async", in_loop(pgq_noop.enqueue_async)),
            ):
                print(f"round {r + 1} {name:15s} wall {wall:7.1f} us  cpu {cpu:6.1f} us")
        loop.run_until_complete(aconn.close())
        loop.run_until_complete(pgq_app.aclose())
    finally:
        conn.close()
        loop.close()


def main() -> int:
    app = pgq_app
    row = pgq_noop.make_row((1,), {}, NO_OPTIONS)
    scope = {"pgq_noop": pgq_noop, "NO_OPTIONS": NO_OPTIONS, "_inserts": _inserts}
    scope |= {"app": app, "row": row, "op": _inserts.Insert(app.database, [row])}
    print(f"make_row            {_us('pgq_noop.make_row((1,), {}, NO_OPTIONS)', scope):6.2f} us")
    print(f"Insert()            {_us('_inserts.Insert(app.database, [row])', scope):6.2f} us")
    print(f"handles             {_us('op.handles(([5], [None], 1))', scope):6.2f} us")
    pgq = PgqueueLib("enqueue_profile", DEFAULT_SERVER)
    pgq.fresh()
    try:
        pgq_noop.enqueue(0)
        _statements(pgq.dsn, _inserts.Insert(app.database, [row]))
        _rounds(pgq.dsn)
        profile = cProfile.Profile()
        for i in range(50):
            pgq_noop.enqueue(i)
        profile.enable()
        for i in range(2000):
            pgq_noop.enqueue(i)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)

        async def go() -> None:
            for i in range(50):
                await pgq_noop.enqueue_async(i)
            profile = cProfile.Profile()
            profile.enable()
            for i in range(2000):
                await pgq_noop.enqueue_async(i)
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
            await app.aclose()

        asyncio.run(go())
    finally:
        app.close()
        pgq.close()
        pgq.drop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
