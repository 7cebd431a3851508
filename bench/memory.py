"""A worker's resident memory over many runs, and what waiting for results costs (issue
#42, point 5), per library, beside the Python peers.

    python -m bench.memory --runs 1000000 --libs pgqueue,pgqueuer,procrastinate

Libraries (--libs; default: those of bench.compare's LIBS that are installed) are
bench.compare's Lib classes, used as its drains use them: the library's own scratch
database (Lib.fresh), its client (Lib.session, one event loop per call), its batch
enqueue (Lib.load) and its worker command (Lib.workers: pgqueue `--concurrency 200`,
procrastinate `--concurrency 100`, pgqueuer `batch_size=100`, the others at their
defaults; async no-op tasks). Per library:

1. Worker growth. One worker process, started as bench.compare starts it. --warmup no-op
   runs (2,000) are bulk-enqueued and drained, then the worker's resident memory is read:
   VmRSS from /proc/<pid>/status (bench.common.status_mb), summed over the worker and any
   child process it has (bench.common.process_tree), a second after its queue emptied:
   `idle`. Then --runs no-op runs, bulk-enqueued in chunks of --chunk (50,000): each chunk
   only once the one before is drained (seen as bench.compare.watch_drain sees a drain),
   so the table never holds more than one chunk of queued jobs; the tables are vacuumed
   and analyzed after each chunk (autovacuum is off on our server, and dead rows would
   slow the claims), and the RSS is read again, a second after each chunk drained (the
   samples go to the JSON). `after` is the last; growth = after / idle - 1, in percent.
   Target for pgqueue (issue #42): no growth beyond 10%.
2. Waiting for results. With that worker stopped, a process of its own (wait_probe, so
   that nothing of step 1 is in it) opens the library's client as bench.compare does,
   enqueues --waits + 10 no-op jobs that no worker runs, starts 10 waits and lets them
   settle (the first wait opens whatever every wait shares: a listener, a pool), reads
   its own VmRSS (`before`), starts --waits (1,000) more waits, all in that one event
   loop, lets them settle --settle seconds (5: longer than every peer's poll interval, so
   that each wait has made its first query and is parked), reads VmRSS again (`after`),
   and cancels them. MB per 1,000 waits = (after - before) * 1000 / --waits. The APIs:
   pgqueue `RunHandle.wait_async()`; pgqueuer `CompletionWatcher.wait_for(job_id)` (it
   resolves to the job's final status; pgqueuer keeps no result); DBOS
   `WorkflowHandleAsync.get_result()` (a poll per handle); chancy `Chancy.wait_for_job`
   (a poll per job). procrastinate, oban and awa have no call that waits for a job's
   outcome: "-".

RSS moves with the allocator (freed memory is not always handed back) and with what was
imported; compare a library's own idle and after figures, and the wait rows across
libraries, not absolute sizes across machines. The peers that poll slowly at their
defaults (chancy every 5 s, DBOS every 1 s) take long over --runs 1,000,000: give them
fewer. Tables go to --out (bench/results/ by default): memory.md and memory.json.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench import compare
from bench.common import DEFAULT_SERVER, process_tree, status_mb, subprocess_env
from bench.pingback import DSN_ENV, QUEUE

PROBE_ENV = "PGQUEUE_BENCH_WAIT_PROBE"  # wait_probe's arguments, as JSON
SETTLE_AFTER_DRAIN = 1.0  # seconds between a drain's end and the RSS read
WARM_WAITS = 10


def rss_mb(pid: int) -> float:
    """Resident memory of `pid` and its descendants now (VmRSS), in MB."""
    return sum(status_mb(p, "VmRSS") for p in process_tree(pid))


@dataclass
class Growth:
    idle: float  # MB after the warm-up
    after: float  # MB after all the runs
    samples: list[tuple[int, float]] = field(default_factory=list)  # (runs so far, MB)

    @property
    def growth(self) -> float:
        return 100 * (self.after / self.idle - 1)


def run_chunk(
    conn: psycopg.Connection[Any], lib: compare.Lib, procs: Any, n: int, timeout: float
) -> None:
    """Bulk-enqueue `n` no-op runs (a multiple of 1,000, at least 2,000) and wait until the
    running worker has drained them; then vacuum the library's tables."""
    since = compare.db_clock(conn)
    lib.load(n)
    queued = compare.unfinished(conn, lib)
    if queued:
        compare.watch_drain(conn, lib, procs, queued, since, timeout=timeout)
    lib.vacuum(conn)


def worker_growth(lib: compare.Lib, runs: int, chunk: int, warmup: int, timeout: float) -> Growth:
    """Step 1 (see the module's docstring), on a fresh database already installed."""
    with psycopg.connect(lib.dsn, autocommit=True) as conn, lib.workers(1) as procs:
        pid = procs[0].pid
        run_chunk(conn, lib, procs, warmup, timeout)
        time.sleep(SETTLE_AFTER_DRAIN)
        got = Growth(idle=rss_mb(pid), after=0.0)
        got.samples.append((0, got.idle))
        done = 0
        while done < runs:
            n = min(chunk, runs - done)
            run_chunk(conn, lib, procs, n, timeout)
            done += n
            time.sleep(SETTLE_AFTER_DRAIN)
            got.samples.append((done, rss_mb(pid)))
            print(
                f"  [{lib.name}] {done:,} runs: worker RSS {got.samples[-1][1]:.1f} MB", flush=True
            )
        got.after = got.samples[-1][1]
    return got


# -- waiting for results: per library, (enqueue n jobs, start a wait on each) ---------------

Prepare = Callable[[compare.Lib, int], Awaitable[list[Any]]]
Start = Callable[[compare.Lib, list[Any]], list[Awaitable[Any]]]


async def _pgqueue_prepare(lib: compare.Lib, n: int) -> list[Any]:
    compare.pgq_app.configure(dsn=lib.dsn)
    return await compare.pgq_noop.enqueue_many_async([(i,) for i in range(n)])


def _pgqueue_start(lib: compare.Lib, handles: list[Any]) -> list[Awaitable[Any]]:
    return [asyncio.create_task(h.wait_async()) for h in handles]


_watchers: list[Any] = []  # pgqueuer's CompletionWatcher of the probe, opened once


async def _pgqueuer_prepare(lib: compare.Lib, n: int) -> list[Any]:
    from pgqueuer.core.completion import CompletionWatcher

    queries = lib.queries  # type: ignore[attr-defined]
    if not _watchers:
        _watchers.append(await CompletionWatcher(queries.driver, queries=queries).__aenter__())
    payloads = [str(i).encode() for i in range(n)]
    return list(await queries.enqueue(["cmp.noop"] * n, payloads, [0] * n))


def _pgqueuer_start(lib: compare.Lib, ids: list[Any]) -> list[Awaitable[Any]]:
    return [_watchers[0].wait_for(jid) for jid in ids]


async def _dbos_prepare(lib: compare.Lib, n: int) -> list[Any]:
    client = lib.client  # type: ignore[attr-defined]
    handles: list[Any] = []
    for start in range(0, n, 20):  # DBOSClient runs each enqueue in a thread
        calls = [
            client.enqueue_async({"queue_name": QUEUE, "workflow_name": "noop"}, i)
            for i in range(start, min(start + 20, n))
        ]
        handles += await asyncio.gather(*calls)
    return handles


def _dbos_start(lib: compare.Lib, handles: list[Any]) -> list[Awaitable[Any]]:
    return [asyncio.create_task(h.get_result()) for h in handles]


async def _chancy_prepare(lib: compare.Lib, n: int) -> list[Any]:
    from bench.peer_chancy import noop

    refs: list[Any] = []
    jobs = [noop.job.with_kwargs(i=i) for i in range(n)]
    async for batch in lib.chancy.push_many(jobs):  # type: ignore[attr-defined]
        refs += batch
    return refs


def _chancy_start(lib: compare.Lib, refs: list[Any]) -> list[Awaitable[Any]]:
    chancy = lib.chancy  # type: ignore[attr-defined]
    return [asyncio.create_task(chancy.wait_for_job(ref)) for ref in refs]


#: library -> (its call, enqueue, start the waits); the others have no such call
WAITERS: dict[str, tuple[str, Prepare, Start]] = {
    "pgqueue": ("RunHandle.wait_async()", _pgqueue_prepare, _pgqueue_start),
    "pgqueuer": ("CompletionWatcher.wait_for(id)", _pgqueuer_prepare, _pgqueuer_start),
    "dbos": ("WorkflowHandleAsync.get_result()", _dbos_prepare, _dbos_start),
    "chancy": ("Chancy.wait_for_job(ref)", _chancy_prepare, _chancy_start),
}


async def _probe(lib: compare.Lib, n: int, settle: float) -> dict[str, float]:
    _, prepare, start = WAITERS[lib.name]
    pid = os.getpid()
    refs = await prepare(lib, WARM_WAITS + n)
    waits = start(lib, refs[:WARM_WAITS])
    await asyncio.sleep(settle)
    before = rss_mb(pid)
    waits += start(lib, refs[WARM_WAITS:])
    await asyncio.sleep(settle)
    after = rss_mb(pid)
    for wait in waits:
        if isinstance(wait, asyncio.Future):
            wait.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    while _watchers:
        await _watchers.pop().__aexit__(None, None, None)
    return {"before": before, "after": after, "per_1000": (after - before) * 1000 / n}


def wait_probe() -> None:
    """Step 2 in its own process (`python -c`): arguments from PROBE_ENV, the result as
    one JSON line on stdout."""
    given = json.loads(os.environ[PROBE_ENV])
    lib = compare.CLASSES[given["lib"]](given["lib"], given["server"])
    lib.dsn = given["dsn"]
    got = lib.session(lambda: _probe(lib, given["waits"], given["settle"]))
    print(json.dumps(got), flush=True)


def wait_memory(lib: compare.Lib, waits: int, settle: float) -> dict[str, float]:
    """Run wait_probe for `lib` (its database installed, no worker running)."""
    env = subprocess_env()
    env[DSN_ENV] = lib.dsn
    env[PROBE_ENV] = json.dumps(
        {"lib": lib.name, "server": lib.server, "dsn": lib.dsn, "waits": waits, "settle": settle}
    )
    code = "from bench.memory import wait_probe; wait_probe()"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=compare.ROOT,
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


# -- output ----------------------------------------------------------------------------------


def markdown(results: dict[str, dict[str, Any]], runs: int, waits: int) -> str:
    head = [
        "library",
        "worker RSS idle (MB)",
        f"after {runs:,} runs (MB)",
        "growth",
        "RSS per 1,000 waits (MB)",
        "wait call",
    ]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for name, got in results.items():
        wait = got.get("waits")
        cells = [
            name,
            f"{got['idle_mb']:.1f}",
            f"{got['after_mb']:.1f}",
            f"{got['growth_pct']:+.1f}%",
            f"{wait['per_1000']:.2f}" if wait else "-",
            WAITERS[name][0] if name in WAITERS else "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if waits != 1000:
        lines.append(f"\n(waits measured {waits:,} at a time, scaled to 1,000)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    p.add_argument("--server", default=DEFAULT_SERVER)
    p.add_argument(
        "--libs",
        default=None,
        help=f"comma-separated, of {','.join(compare.CLASSES)} (default: those of"
        f" {','.join(compare.LIBS)} installed)",
    )
    p.add_argument("--runs", type=int, default=1_000_000, help="no-op runs after the warm-up")
    p.add_argument("--chunk", type=int, default=50_000, help="runs enqueued at a time")
    p.add_argument("--warmup", type=int, default=2_000, help="runs before the idle reading")
    p.add_argument("--waits", type=int, default=1000, help="waits started at once (0: skip)")
    p.add_argument("--timeout", type=float, default=1800.0, help="max seconds for a chunk's drain")
    p.add_argument("--settle", type=float, default=5.0, help="seconds the waits settle")
    p.add_argument("--out", type=Path, default=compare.RESULTS)
    args = p.parse_args(argv)
    for flag in ("runs", "chunk", "warmup"):
        value = getattr(args, flag)
        if value < 2000 or value % 1000:
            p.error(f"--{flag}: {value} is not a multiple of 1,000 of at least 2,000")
    if args.chunk > args.runs:
        args.chunk = args.runs
    if args.runs % args.chunk % 1000 or (args.runs % args.chunk and args.runs % args.chunk < 2000):
        p.error("--runs: the last chunk (--runs modulo --chunk) would be under 2,000 runs")
    if args.libs is None:
        names = [
            x
            for x in compare.LIBS
            if importlib.util.find_spec(compare.PACKAGES.get(x, x)) is not None
        ]
    else:
        names = [x for x in args.libs.split(",") if x]
    unknown = set(names) - set(compare.CLASSES)
    if unknown:
        p.error(f"--libs: unknown {', '.join(sorted(unknown))} (of {', '.join(compare.CLASSES)})")
    command = "python -m bench.memory " + shlex.join(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    versions = compare._versions()
    print(f"{command}: {versions}; load {os.getloadavg()}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        lib = compare.CLASSES[name](name, args.server)
        lib.fresh()
        try:
            grown = worker_growth(lib, args.runs, args.chunk, args.warmup, args.timeout)
            got: dict[str, Any] = {
                "idle_mb": grown.idle,
                "after_mb": grown.after,
                "growth_pct": grown.growth,
                "samples": grown.samples,
            }
            print(
                f"  [{name}] worker RSS idle {grown.idle:.1f} MB, after {args.runs:,} runs"
                f" {grown.after:.1f} MB ({grown.growth:+.1f}%)",
                flush=True,
            )
            if args.waits and name in WAITERS:
                got["waits"] = wait_memory(lib, args.waits, args.settle)
                print(
                    f"  [{name}] {args.waits:,} waits ({WAITERS[name][0]}):"
                    f" {got['waits']['before']:.1f} -> {got['waits']['after']:.1f} MB,"
                    f" {got['waits']['per_1000']:.2f} MB per 1,000",
                    flush=True,
                )
            results[name] = got
        finally:
            lib.close()
            lib.drop()
    table = markdown(results, args.runs, args.waits)
    print(table)
    verdict = ""
    if "pgqueue" in results:
        growth = results["pgqueue"]["growth_pct"]
        verdict = (
            f"pgqueue worker growth over {args.runs:,} runs <= 10%: {growth:+.1f}%,"
            f" {'PASS' if growth <= 10 else 'FAIL'}"
        )
        print(verdict)
    args.out.mkdir(parents=True, exist_ok=True)
    md = [f"# Worker memory ({started})", "", f"`{command}`; {versions}.", "", table, ""]
    if verdict:
        md += [verdict, ""]
    (args.out / "memory.md").write_text("\n".join(md))
    (args.out / "memory.json").write_text(
        json.dumps(
            {
                "command": command,
                "started": started,
                "versions": versions,
                "runs": args.runs,
                "waits": args.waits,
                "results": results,
            },
            indent=1,
        )
    )
    print(f"wrote {args.out / 'memory.md'}, memory.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
