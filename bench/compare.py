"""pgqueue side by side with every Python peer: one run, same server, same machine.

    python -m bench.compare --repeat 3

Libraries (--libs, default: all of them that are installed): pgqueue, procrastinate,
pgqueuer, oban (oban-py, Python 3.12+), awa (awa-pg), chancy, dbos; and floor (below).
Each library is called as an application calls it: its async API, every call of a step
awaited inside ONE event loop that lives for the whole step (Lib.session, one
asyncio.run), never a loop started per call; its sync API, where the benchmark measures
one (pgqueue), in rows of their own. The peers' tasks and worker programs are in
bench/peer_*.py; each runs at its library's documented defaults, through its public API
(see each Lib class). A step a library cannot take shows "-".

Each library gets its own scratch database (cmp_<lib>), dropped and recreated (schema
installed the library's own way) at the start of every repeat; the order of the
libraries is shuffled per repeat. Per library and repeat:

1. bulk enqueue: --batches batches of 1,000 no-op jobs through the library's batch API
   (pgqueue `Task.enqueue_many_async`, procrastinate `Task.batch_defer_async`, pgqueuer
   `Queries.enqueue` with lists, oban `Oban.enqueue_many`, awa `insert_many_copy`,
   chancy `push_many`; DBOS has none), after 2 warm-up batches; then pgqueue's sync
   `Task.enqueue_many` (row bulk_sync);
2. single enqueue: --single jobs, one call (one transaction) each (`Task.enqueue_async`,
   `Task.defer_async`, `Queries.enqueue`, `Worker.enqueue`, `AsyncClient.insert`,
   `Chancy.push`, `DBOSClient.enqueue_async`, the floor's FLOOR_ENQUEUE); then
   pgqueue's sync `Task.enqueue` (row single_sync);
3. processing: one worker process started the way the library's docs show
   (`python -m pgqueue worker`, `procrastinate worker`, `pgq run`, `oban start`, and the
   worker programs of bench/peer_*.py), async no-op tasks; pgqueue, procrastinate and
   pgqueuer claim up to 100 jobs (pgqueuer `batch_size=100`, no concurrency limit;
   pgqueue `--concurrency 200`, which claims half its concurrency at a time;
   procrastinate `--concurrency 100`, which fetches one job per query), the new peers
   run at their defaults here too; drains everything steps 1-2
   left queued. Rate = jobs / time
   from the first job leaving the queue to the last finishing, seen by probing the
   library's own table every 10 ms (clock_timestamp(), same method for all; the
   probes are index lookups, see watch_drain: counting the queue on every poll took a
   tenth to a quarter of a core from the drain, more for pgqueue than for pgqueuer);
4. idle pickup: the same worker, now idle and LISTENing; this process enqueues one `ping`
   job every 15-35 ms (async enqueue, all from one event loop, asyncio.sleep between); the
   task body sends (i, time.time()) over UDP. Latency = task body start - enqueue call
   start, same host clock. A ping that has not run 10 s after the last was sent counts as
   that wait, and the table notes how many (pgqueuer's worker has left a tenth of its
   pings unrun for seconds);
3b. processing with two worker processes: --two-runs jobs bulk-enqueued (untimed), then
   two worker processes started as in step 3 drain them; same rate method;
3c. deep queue: --deep jobs (60,000) bulk-enqueued (untimed), drained by one worker
   process, then again by two. A drain of step 3's ~12k jobs is over in about a second at
   these rates, mostly start-up; this one measures the steady state of a queue that
   stays deep (and shows whose claim slows down as the queue grows); pgqueue once more
   with `--concurrency 100` (claims of 50), the setting of earlier sessions;
4b. chains: a 4-task chain (each task enqueues the next: `enqueue_async`,
   procrastinate's `defer_async` from the job context, pgqueuer's `Queries.enqueue` on the
   PgQueuer's own driver, oban's `Worker.enqueue`, awa's `AsyncClient.insert` on the
   worker's client, DBOS's `Queue.enqueue_async`; chancy has no documented way for a job
   to reach its app, so no chain), and a 4-step workflow (`ctx.step` x4) in pgqueue,
   which the peers have no equivalent of. Throughput: --chains first tasks bulk-enqueued
   with no worker running, then one worker process; chains/s = chains finished / (last
   chain's end - first chain's start), from UDP pings sent by the first and last task
   bodies (capped like a drain). Latency: an idle worker; one chain at a time, every
   15-35 ms after the previous one ended; enqueue call start -> last task body;
5. out of the box (--defaults jobs, 50,000): no-op async jobs enqueued (untimed), one
   worker process started with the library's defaults, no tuning option at all. pgqueue
   has two rows, both on runs routed at enqueue with `.options(queue="cmp")` to tasks
   that declare no queue (pgq_user_app): `defaults`, the CLI with no option but the
   queue (`pgqueue worker --app ... --queues cmp`), and `defaults_api`, the Python API
   (`app.worker(queues=["cmp"]).run_async()`, pgq_user_worker); pgqueuer
   `pgqueuer.run(factory)` on uvloop, as `pgq run` does: batch_size 10; procrastinate
   `procrastinate worker`: concurrency 1; the new peers as in step 3; same rate method;
6. backlog: the worker stopped, --backlog jobs inserted with INSERT ... SELECT into another
   queue (pgqueuer: another entrypoint), VACUUM ANALYZE, --backlog-runs jobs bulk-enqueued
   into the benchmark queue, a fresh worker drains them: rate and ratio to the drain of
   as many jobs without the backlog (step 3c's one-process drain when --backlog-runs
   equals --deep, the default; else step 3's): the same number of jobs on both sides, as
   a drain of a quarter of a second is too short to compare.

Before each drain and each pickup series the server is made to write out what earlier
steps left dirty (`CHECKPOINT`, settle()): otherwise a checkpoint's writes and fsyncs,
which slow every commit's WAL flush for minutes, land in whichever library's step is
running then (without it, pickup p99s ranged from 4.5 to 41 ms between repeats). The
pickup series has 1,000 pings, so that its p99 is the tenth-slowest ping, not a single
outlier.

The floor (FloorLib; in the default --libs, or name it: `--libs pgqueue,pgqueuer,floor`)
is the least the same work costs, written with bare psycopg against a table of its own
(FLOOR_DDL: id, task, state, i; an index for queued jobs and one for running ones). It
takes the single enqueue step (a bare psycopg AsyncConnection in the same long-lived
loop, one autocommit statement per job: INSERT, NOTIFY, COMMIT in one round trip,
FLOOR_ENQUEUE), every drain (process, two, deep, defaults: one worker process per
floor_worker, claiming BATCH jobs at a time with `UPDATE ... WHERE id IN (SELECT ...
FOR UPDATE SKIP LOCKED LIMIT 100) RETURNING`, committed without waiting for its WAL
flush as pgqueue's claim is, marking them done with a second UPDATE, which waits,
claiming again at once while work remains, waiting on LISTEN only when none is left;
it has no options, so its defaults row is the same worker) and the pickup (the same
worker, woken by the ping's NOTIFY). The summary and compare.json (`floor_ratios`) give
pgqueue's rate over the floor's, per repeat and their median: single enqueue (target
>= 0.95x), the deep drain at --concurrency 100 (target >= 0.6x, against the floor's
one-process deep drain), the two out-of-the-box rows (reported) and the other drains
(reported).
`--only defaults,pickup` (say) runs just those steps (process implies bulk and single,
whose jobs it drains).

Tables go to bench/results/compare.md (+ .json, git-ignored) and a plot to
bench/results/compare.png.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import random
import shlex
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import procrastinate
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgqueue
from bench.common import DEFAULT_SERVER, ROOT, percentile, subprocess_env
from bench.pingback import CHAIN, DSN_ENV, QUEUE, UDP_ENV
from bench.pingback import chain_link as _chain_link
from bench.pingback import ping_back as _ping_back
from pgqueue.db import migrate

OTHER = "other"
CONCURRENCY = 100
# Jobs a claim may take: pgqueuer's batch_size. pgqueue claims half its concurrency at a
# time (two claims in flight), so it runs with twice that: the rule pgqueuer itself sets
# when it has a limit (max_concurrent_tasks >= 2 x batch_size; here it has none).
# `--concurrency 100` (claims of 50) is measured too.
BATCH = 100
PGQUEUE_CONCURRENCY = 2 * BATCH
LIBS = ("pgqueue", "procrastinate", "pgqueuer", "oban", "awa", "chancy", "dbos")
PACKAGES = {"pgqueue": "pgqueue", "awa": "awa"}  # the import name of each, where not its own
RESULTS = ROOT / "bench" / "results"
STEPS = ("bulk", "single", "process", "two", "deep", "pickup", "chains", "defaults", "backlog")

# -- the task modules (imported by the worker subprocesses too) ------------------------------

pgq_app = pgqueue.App()


@pgq_app.task(name="cmp.noop", queue=QUEUE)
async def pgq_noop(i: int = 0) -> None:
    """No-op."""


@pgq_app.task(name="cmp.ping", queue=QUEUE)
async def pgq_ping(i: int = 0) -> None:
    _ping_back(i)


@pgq_app.task(name="cmp.chain", queue=QUEUE)
async def pgq_chain(i: int = 0, step: int = 0) -> None:
    if _chain_link(i, step):
        await pgq_chain.enqueue_async(i, step + 1)


# What a user writes (issue #42): async tasks that declare no queue, runs routed to one at
# enqueue with `.options(queue=...)`, a worker given no option but that queue: through the
# CLI (`pgqueue worker --app ... --queues cmp`) and through the Python API
# (`app.worker(queues=[q]).run_async()`, pgq_user_worker). Step 5's two pgqueue rows.
pgq_user_app = pgqueue.App()


@pgq_user_app.task(name="cmp.user_noop")
async def pgq_user_noop(i: int = 0) -> None:
    """No-op."""


def pgq_user_worker() -> None:
    """Step 5's Python-API worker: `app.worker(queues=[QUEUE])`, no other option."""
    pgq_user_app.configure(dsn=os.environ[DSN_ENV])
    asyncio.run(pgq_user_app.worker(queues=[QUEUE]).run_async())


def _noop_step() -> None:
    """No-op."""


@pgq_app.workflow(name="cmp.flow", queue=QUEUE)
def pgq_flow(ctx: pgqueue.Context, i: int = 0) -> None:
    _ping_back(i, "s")
    for k in range(CHAIN):
        ctx.step(f"step{k}", _noop_step)
    _ping_back(i, "e")


async def proc_noop(i: int = 0) -> None:
    """No-op."""


async def proc_ping(i: int = 0) -> None:
    _ping_back(i)


async def proc_chain(context: procrastinate.JobContext, i: int = 0, step: int = 0) -> None:
    if _chain_link(i, step):
        await context.app.tasks["cmp.chain"].defer_async(i=i, step=step + 1)


def make_proc_app(dsn: str) -> procrastinate.App:
    """A procrastinate App with the tasks (one per DSN: tasks are bound to their App)."""
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    app.task(name="cmp.noop", queue=QUEUE)(proc_noop)
    app.task(name="cmp.ping", queue=QUEUE)(proc_ping)
    app.task(name="cmp.chain", queue=QUEUE, pass_context=True)(proc_chain)
    return app


proc_app = make_proc_app(os.environ.get(DSN_ENV, ""))


@contextlib.asynccontextmanager
async def pgqueuer_main() -> AsyncIterator[Any]:
    """`pgq run bench.compare:pgqueuer_main`: the README's factory, in the async context
    manager form pgqueuer 1.6.0 requires."""
    import asyncpg  # type: ignore[import-untyped]
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job

    connection = await asyncpg.connect(os.environ[DSN_ENV])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("cmp.noop")
    async def noop(job: Job) -> None:
        """No-op."""

    @pgq.entrypoint("cmp.ping")
    async def ping(job: Job) -> None:
        _ping_back(int(job.payload or b"0"))

    queries = pgq.queries
    assert queries is not None

    @pgq.entrypoint("cmp.chain")
    async def chain(job: Job) -> None:
        i, step = (int(x) for x in (job.payload or b"0 0").split())
        if _chain_link(i, step):
            await queries.enqueue("cmp.chain", f"{i} {step + 1}".encode())

    try:
        yield pgq
    finally:
        await connection.close()


# -- the libraries, as the benchmark drives them -------------------------------------------


def _admin(server: str) -> psycopg.Connection[Any]:
    return psycopg.connect(server, autocommit=True)


T = TypeVar("T")


async def _timed(n: int, calls: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await calls()
    return n / (time.perf_counter() - t0)


async def _bulk_rate(batches: int, size: int, once: Callable[[], Awaitable[Any]]) -> float:
    """Lib.abulk's measure: jobs/s of `batches` awaits of `once` (one batch enqueue of
    `size` jobs), after 2 warm-up ones."""
    for _ in range(2):
        await once()

    async def go() -> None:
        for _ in range(batches):
            await once()

    return await _timed(batches * size, go)


async def _single_rate(n: int, enqueue: Callable[[int], Awaitable[Any]]) -> float:
    """Lib.asingle's measure: jobs/s of `n` awaits of `enqueue(i)` (one job, one
    transaction each), after 20 warm-up ones."""
    for i in range(20):
        await enqueue(i)

    async def go() -> None:
        for i in range(n):
            await enqueue(i)

    return await _timed(n, go)


@dataclass
class Lib:
    """One library as an application calls it. Its client side is async (aopen, abulk,
    asingle, aping, ...): every step that enqueues runs all its calls in ONE event loop
    kept for the whole step (session(): one asyncio.run), as a web app or an async
    worker does, never a loop started per call. Sync APIs, where a library has them and
    the benchmark measures them, are separate rows (bulk_sync, single_sync)."""

    name: str
    server: str
    dsn: str = ""
    udp_port: int = 0
    defaults: bool = False  # worker_cmd: the library's defaults, no tuning option (step 5)

    @property
    def db(self) -> str:
        return f"cmp_{self.name}"

    def fresh(self) -> None:
        with _admin(self.server) as conn:
            ident = sql.Identifier(self.db)
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
        if self.server.startswith(("postgresql://", "postgres://")):
            # asyncpg wants a URL (the embedded server's has ?host=<socket dir>)
            self.dsn = urlsplit(self.server)._replace(path="/" + self.db).geturl()
        else:
            self.dsn = make_conninfo(self.server, dbname=self.db)
        self.install()

    @property
    def url(self) -> str:
        """The DSN as a URL (some peers take nothing else)."""
        if self.dsn.startswith(("postgresql://", "postgres://")):
            return self.dsn
        info = psycopg.conninfo.conninfo_to_dict(self.dsn)
        user, host = info.get("user", "postgres"), info.get("host", "127.0.0.1")
        port, password = info.get("port", 5432), info.get("password")
        auth = f"{user}:{password}" if password else f"{user}"
        return f"postgresql://{auth}@{host}:{port}/{info['dbname']}"

    def drop(self) -> None:
        with _admin(self.server) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.db))
            )

    def env(self) -> dict[str, str]:
        env = subprocess_env()
        env[DSN_ENV] = self.dsn
        env[UDP_ENV] = str(self.udp_port)
        env["PGDSN"] = self.dsn
        return env

    @contextlib.contextmanager
    def workers(self, n: int = 1) -> Iterator[list[subprocess.Popen[bytes]]]:
        """`n` worker processes, each started the library's way, stopped at the end."""
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(n):
                procs.append(subprocess.Popen(self.worker_cmd(), cwd=ROOT, env=self.env()))
            yield procs
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    #: the steps this library takes part in (FloorLib: only the pickup)
    steps: ClassVar[tuple[str, ...]] = ()  # () means all of STEPS
    #: what start_chains/start_chain can start: "chain" (4 tasks), "flow" (4-step workflow)
    kinds: ClassVar[tuple[str, ...]] = ("chain",)
    #: the rows of step 5 (out of the box): "defaults" (the library's worker command),
    #: and for pgqueue "defaults_api" (a worker built with the Python API)
    default_rows: ClassVar[tuple[str, ...]] = ("defaults",)

    def session(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run `fn()` in one event loop that lives for the whole call, with the library's
        client opened before (aopen) and closed after (aclose), untimed."""

        async def main() -> T:
            await self.aopen()
            try:
                return await fn()
            finally:
                await self.aclose()

        return asyncio.run(main())

    # per library: the client side, async
    def install(self) -> None:
        raise NotImplementedError

    def worker_cmd(self) -> list[str]:
        raise NotImplementedError

    async def aopen(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def abulk(self, batches: int, size: int) -> float:
        """jobs/s of `batches` batch enqueues of `size` jobs, after 2 warm-up batches."""
        raise NotImplementedError

    async def asingle(self, n: int) -> float:
        """jobs/s of `n` single enqueues (one transaction each), after 20 warm-up ones."""
        raise NotImplementedError

    async def aping(self, i: int) -> None:
        raise NotImplementedError

    async def aload(self, n: int) -> None:
        """Enqueue about `n` no-op jobs, untimed (what abulk enqueues: n // 1000 - 2
        batches and 2 warm-up ones)."""
        await self.abulk(max(n // 1000 - 2, 0), 1000)

    async def aload_defaults(self, n: int, row: str) -> None:
        """Enqueue step 5's `n` jobs for `row` (see default_rows)."""
        await self.aload(n)

    async def astart_chains(self, kind: str, n: int) -> None:
        """Enqueue the first task of chains 0..n-1 in bulk."""
        raise NotImplementedError

    async def astart_chain(self, kind: str, i: int) -> None:
        raise NotImplementedError

    # the same, each in its own session (one event loop for the call)
    def bulk(self, batches: int, size: int) -> float:
        return self.session(lambda: self.abulk(batches, size))

    def single(self, n: int) -> float:
        return self.session(lambda: self.asingle(n))

    def load(self, n: int) -> None:
        self.session(lambda: self.aload(n))

    def start_chains(self, kind: str, n: int) -> None:
        self.session(lambda: self.astart_chains(kind, n))

    # sync APIs, measured as their own rows where a library has them
    def bulk_sync(self, batches: int, size: int) -> float:
        raise NotImplementedError

    def single_sync(self, n: int) -> float:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def unfinished_sql(self) -> str:
        """One count: the drain's jobs still queued or running. Exact but not cheap (it
        reads every queued job: about 15 ms for 100,000), so drains run it only before
        and, when capped, at the end, never in their polling loop."""
        raise NotImplementedError

    def pending_sql(self) -> str:
        """One boolean: is any job of the drain still queued or running? A probe or two of
        an index, cheap enough to poll every few milliseconds during a drain. The default
        falls back to the count."""
        return f"SELECT ({self.unfinished_sql()}) > 0"

    def started_sql(self) -> str:
        """One boolean: has a job left the queue since %(since)s (the database's clock
        before the workers started)? Also takes %(n)s, the unfinished count then. Cheap
        like pending_sql; the default falls back to the count."""
        return f"SELECT ({self.unfinished_sql()}) < %(n)s"

    def purge_sql(self) -> str:
        raise NotImplementedError

    def purge(self, conn: psycopg.Connection[Any]) -> None:
        """Delete the jobs of the benchmark's queue still waiting (a capped drain's)."""
        conn.execute(self.purge_sql())  # type: ignore[arg-type]

    def load_backlog(self, conn: psycopg.Connection[Any], n: int) -> None:
        raise NotImplementedError

    def vacuum(self, conn: psycopg.Connection[Any]) -> None:
        raise NotImplementedError


def _rate(n: int, fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0)


class PgqueueLib(Lib):
    concurrency: int = PGQUEUE_CONCURRENCY
    worker_args: tuple[str, ...] = ()  # more `pgqueue worker` options (bench.cpu A/Bs)
    default_rows = ("defaults", "defaults_api")
    default_row: str = "defaults"  # the row worker_cmd starts when self.defaults

    def install(self) -> None:
        migrate.upgrade(self.dsn)
        pgq_app.configure(dsn=self.dsn)
        pgq_user_app.configure(dsn=self.dsn)

    def worker_cmd(self) -> list[str]:
        if self.defaults and self.default_row == "defaults_api":
            code = "from bench.compare import pgq_user_worker; pgq_user_worker()"
            return [sys.executable, "-c", code]
        if self.defaults:
            # the CLI with no option but the app and the queue its runs are routed to
            app = "bench.compare:pgq_user_app"
            return [
                *(sys.executable, "-m", "pgqueue", "worker", "--app", app),
                *("--dsn", self.dsn, "--queues", QUEUE),
            ]
        return [
            sys.executable,
            *("-m", "pgqueue", "worker", "--app", "bench.compare:pgq_app", "--dsn", self.dsn),
            *("--queues", QUEUE, "--concurrency", str(self.concurrency), "--log-level", "WARNING"),
            *self.worker_args,
        ]

    async def aclose(self) -> None:
        await pgq_app.aclose()
        await pgq_user_app.aclose()

    async def abulk(self, batches: int, size: int) -> float:
        items = [(i,) for i in range(size)]
        return await _bulk_rate(batches, size, lambda: pgq_noop.enqueue_many_async(items))

    async def asingle(self, n: int) -> float:
        return await _single_rate(n, pgq_noop.enqueue_async)

    async def aping(self, i: int) -> None:
        await pgq_ping.enqueue_async(i)

    async def aload_defaults(self, n: int, row: str) -> None:
        # runs routed to the queue at enqueue, as issue #42's user does
        routed = pgq_user_noop.options(queue=QUEUE)
        items = [(i,) for i in range(1000)]
        for _ in range(n // 1000):
            await routed.enqueue_many_async(items)

    kinds = ("chain", "flow")

    async def astart_chains(self, kind: str, n: int) -> None:
        if kind == "flow":
            await pgq_flow.enqueue_many_async([(i,) for i in range(n)])
        else:
            await pgq_chain.enqueue_many_async([(i, 0) for i in range(n)])

    async def astart_chain(self, kind: str, i: int) -> None:
        if kind == "flow":
            await pgq_flow.enqueue_async(i)
        else:
            await pgq_chain.enqueue_async(i, 0)

    def bulk_sync(self, batches: int, size: int) -> float:
        items = [(i,) for i in range(size)]
        for _ in range(2):
            pgq_noop.enqueue_many(items)

        def go() -> None:
            for _ in range(batches):
                pgq_noop.enqueue_many(items)

        return _rate(batches * size, go)

    def single_sync(self, n: int) -> float:
        for i in range(20):
            pgq_noop.enqueue(i)

        def go() -> None:
            for i in range(n):
                pgq_noop.enqueue(i)

        return _rate(n, go)

    def close(self) -> None:
        pgq_app.close()
        pgq_user_app.close()

    def unfinished_sql(self) -> str:
        # two counts, each on its partial index (an IN list would seq-scan the backlog)
        return (
            "SELECT (SELECT count(*) FROM pgqueue.runs WHERE queue = 'cmp' AND state = 'queued')"
            " + (SELECT count(*) FROM pgqueue.runs WHERE queue = 'cmp' AND state = 'running')"
        )

    def pending_sql(self) -> str:
        # the newest queued run first: the claims take the oldest, so this probe finds a
        # live entry at once until the last batch
        return (
            "SELECT (SELECT id FROM pgqueue.runs WHERE queue = 'cmp' AND state = 'queued'"
            " ORDER BY priority DESC, id DESC LIMIT 1) IS NOT NULL"
            " OR EXISTS (SELECT 1 FROM pgqueue.runs WHERE queue = 'cmp' AND state = 'running')"
        )

    def started_sql(self) -> str:
        return (
            "SELECT EXISTS (SELECT 1 FROM pgqueue.runs WHERE queue = 'cmp' AND state = 'running')"
            " OR EXISTS (SELECT 1 FROM pgqueue.runs WHERE finished_at >= %(since)s"
            " AND state IN ('succeeded', 'failed', 'canceled') AND queue = 'cmp')"
        )

    def purge_sql(self) -> str:
        return "DELETE FROM pgqueue.runs WHERE queue = 'cmp' AND state = 'queued'"

    def load_backlog(self, conn: psycopg.Connection[Any], n: int) -> None:
        conn.execute(
            "INSERT INTO pgqueue.runs (task, queue, args, kwargs)"
            " SELECT 'other.noop', 'other', jsonb_build_array(g), '{}'::jsonb"
            " FROM generate_series(1, %s) AS g",
            (n,),
        )

    def vacuum(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("VACUUM (ANALYZE) pgqueue.runs")


class ProcrastinateLib(Lib):
    app: Any = None

    def install(self) -> None:
        self.session(lambda: self.app.schema_manager.apply_schema_async())

    async def aopen(self) -> None:
        self.app = make_proc_app(self.dsn)
        await self.app.open_async()

    async def aclose(self) -> None:
        await self.app.close_async()

    def worker_cmd(self) -> list[str]:
        if self.defaults:
            return [
                *(sys.executable, "-m", "procrastinate", "--app", "bench.compare.proc_app"),
                "worker",
            ]
        return [
            *(sys.executable, "-m", "procrastinate", "--app", "bench.compare.proc_app"),
            *("--log-level", "warning", "worker", "--queues", QUEUE),
            *("--concurrency", str(CONCURRENCY)),
        ]

    def _task(self, name: str) -> Any:
        return self.app.tasks[name]

    async def abulk(self, batches: int, size: int) -> float:
        items = [{"i": i} for i in range(size)]
        task = self._task("cmp.noop")
        return await _bulk_rate(batches, size, lambda: task.batch_defer_async(*items))

    async def asingle(self, n: int) -> float:
        task = self._task("cmp.noop")
        return await _single_rate(n, lambda i: task.defer_async(i=i))

    async def aping(self, i: int) -> None:
        await self._task("cmp.ping").defer_async(i=i)

    async def astart_chains(self, kind: str, n: int) -> None:
        items = [{"i": i, "step": 0} for i in range(n)]
        await self._task("cmp.chain").batch_defer_async(*items)

    async def astart_chain(self, kind: str, i: int) -> None:
        await self._task("cmp.chain").defer_async(i=i, step=0)

    def unfinished_sql(self) -> str:
        return (
            "SELECT count(*) FROM procrastinate_jobs WHERE queue_name = 'cmp'"
            " AND status IN ('todo', 'doing')"
        )

    def purge_sql(self) -> str:
        return "DELETE FROM procrastinate_jobs WHERE queue_name = 'cmp' AND status = 'todo'"

    def load_backlog(self, conn: psycopg.Connection[Any], n: int) -> None:
        conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args)"
            " SELECT 'other', 'other.noop', jsonb_build_object('i', g)"
            " FROM generate_series(1, %s) AS g",
            (n,),
        )

    def vacuum(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("VACUUM (ANALYZE) procrastinate_jobs")
        conn.execute("VACUUM (ANALYZE) procrastinate_events")


class PgqueuerLib(Lib):
    conn: Any = None
    queries: Any = None

    def install(self) -> None:
        subprocess.run([_script("pgq"), "install"], env=self.env(), check=True, capture_output=True)

    async def aopen(self) -> None:
        import asyncpg  # type: ignore[import-untyped]
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        self.conn = await asyncpg.connect(self.dsn)
        self.queries = Queries(AsyncpgDriver(self.conn))

    async def aclose(self) -> None:
        await self.conn.close()

    def worker_cmd(self) -> list[str]:
        # what `pgq run bench.compare:pgqueuer_main --batch-size 100` does (pgqueuer.run on
        # uvloop); the `pgq run` CLI itself crashes in pgqueuer 1.6.0 with typer 0.29
        # (setup_fancy_logger gets a str, not a LogLevel)
        batch = "" if self.defaults else f", batch_size={BATCH}"
        code = (
            "import uvloop, pgqueuer; uvloop.run(pgqueuer.run("
            f"'bench.compare:pgqueuer_main'{batch}))"
        )
        return [sys.executable, "-c", code]

    async def abulk(self, batches: int, size: int) -> float:
        names = ["cmp.noop"] * size
        payloads: list[bytes | None] = [str(i).encode() for i in range(size)]
        prios = [0] * size
        return await _bulk_rate(batches, size, lambda: self.queries.enqueue(names, payloads, prios))

    async def asingle(self, n: int) -> float:
        return await _single_rate(n, lambda i: self.queries.enqueue("cmp.noop", str(i).encode()))

    async def aping(self, i: int) -> None:
        await self.queries.enqueue("cmp.ping", str(i).encode())

    async def astart_chains(self, kind: str, n: int) -> None:
        payloads: list[bytes | None] = [f"{i} 0".encode() for i in range(n)]
        await self.queries.enqueue(["cmp.chain"] * n, payloads, [0] * n)

    async def astart_chain(self, kind: str, i: int) -> None:
        await self.queries.enqueue("cmp.chain", f"{i} 0".encode())

    def unfinished_sql(self) -> str:
        # finished jobs are deleted (and logged to pgqueuer_log); both counts use an index
        return (
            "SELECT (SELECT count(*) FROM pgqueuer WHERE entrypoint = 'cmp.noop'"
            " AND status = 'queued') + (SELECT count(*) FROM pgqueuer WHERE status = 'picked')"
        )

    def pending_sql(self) -> str:
        # newest first, on its (entrypoint, priority DESC, id) index, as for pgqueue
        return (
            "SELECT (SELECT id FROM pgqueuer WHERE entrypoint = 'cmp.noop' AND status = 'queued'"
            " ORDER BY priority, id DESC LIMIT 1) IS NOT NULL"
            " OR EXISTS (SELECT 1 FROM pgqueuer WHERE status = 'picked')"
        )

    def started_sql(self) -> str:
        # nothing is enqueued during a drain, so a log row since then is a job's
        return (
            "SELECT EXISTS (SELECT 1 FROM pgqueuer WHERE status = 'picked')"
            " OR EXISTS (SELECT 1 FROM pgqueuer_log WHERE created >= %(since)s)"
        )

    def purge_sql(self) -> str:
        return (
            "DELETE FROM pgqueuer WHERE status = 'queued'"
            " AND entrypoint IN ('cmp.noop', 'cmp.ping', 'cmp.chain')"
        )

    def load_backlog(self, conn: psycopg.Connection[Any], n: int) -> None:
        conn.execute(
            "INSERT INTO pgqueuer (priority, entrypoint, status, payload)"
            " SELECT 0, 'other.noop', 'queued', convert_to(g::text, 'UTF8')"
            " FROM generate_series(1, %s) AS g",
            (n,),
        )

    def vacuum(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("VACUUM (ANALYZE) pgqueuer")


def _script(name: str) -> str:
    """A console script installed beside this interpreter (a peer's CLI)."""
    return str(Path(sys.executable).with_name(name))


class ObanLib(Lib):
    """oban-py: its documented client (`Oban(pool=await Oban.create_pool(dsn))`, no
    queues, `async with`), `Worker.enqueue` / `oban.enqueue_many`, and its CLI worker
    `oban start --queues cmp:10`: a queue needs a limit, and 10 is the one its README
    and docs give (the pool's default size is 10 too)."""

    pool: Any = None
    oban: Any = None

    def install(self) -> None:
        subprocess.run(
            [_script("oban"), "install", "--dsn", self.url], check=True, capture_output=True
        )

    async def aopen(self) -> None:
        from bench import peer_oban

        self.pool, self.oban = await peer_oban.open_client(self.url)

    async def aclose(self) -> None:
        await self.oban.__aexit__(None, None, None)
        await self.pool.close()

    def worker_cmd(self) -> list[str]:
        quiet = () if self.defaults else ("--log-level", "WARNING")
        return [_script("oban"), "start", "--dsn", self.url, "--queues", f"{QUEUE}:10", *quiet]

    async def abulk(self, batches: int, size: int) -> float:
        from bench.peer_oban import new

        async def once() -> None:
            await self.oban.enqueue_many([new("noop", {"i": i}) for i in range(size)])

        return await _bulk_rate(batches, size, once)

    async def asingle(self, n: int) -> float:
        from bench.peer_oban import Noop

        return await _single_rate(n, lambda i: Noop.enqueue({"i": i}))  # type: ignore[attr-defined]

    async def aping(self, i: int) -> None:
        from bench.peer_oban import Ping

        await Ping.enqueue({"i": i})  # type: ignore[attr-defined]

    async def astart_chains(self, kind: str, n: int) -> None:
        from bench.peer_oban import new

        await self.oban.enqueue_many([new("chain", {"i": i, "step": 0}) for i in range(n)])

    async def astart_chain(self, kind: str, i: int) -> None:
        from bench.peer_oban import Chain

        await Chain.enqueue({"i": i, "step": 0})  # type: ignore[attr-defined]

    def unfinished_sql(self) -> str:
        return (
            "SELECT count(*) FROM oban_jobs WHERE queue = 'cmp'"
            " AND state IN ('available', 'scheduled', 'executing')"
        )

    def pending_sql(self) -> str:
        return (
            "SELECT EXISTS (SELECT 1 FROM oban_jobs WHERE queue = 'cmp'"
            " AND state IN ('available', 'executing'))"
        )

    def started_sql(self) -> str:
        return (
            "SELECT EXISTS (SELECT 1 FROM oban_jobs WHERE queue = 'cmp' AND state = 'executing')"
            " OR EXISTS (SELECT 1 FROM oban_jobs WHERE queue = 'cmp'"
            " AND completed_at >= (%(since)s AT TIME ZONE 'UTC'))"
        )

    def purge_sql(self) -> str:
        return "DELETE FROM oban_jobs WHERE queue = 'cmp' AND state = 'available'"

    def load_backlog(self, conn: psycopg.Connection[Any], n: int) -> None:
        conn.execute(
            "INSERT INTO oban_jobs (queue, worker, args)"
            " SELECT 'other', 'bench.peer_oban.Noop', jsonb_build_object('i', g)"
            " FROM generate_series(1, %s) AS g",
            (n,),
        )

    def vacuum(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("VACUUM (ANALYZE) oban_jobs")


class ChancyLib(Lib):
    """chancy: `Chancy(dsn)` opened with `async with`, `chancy.push` / `push_many` of
    `@job` functions, and the worker program its docs show (bench.peer_chancy.main), its
    queue declared with the defaults but the asyncio executor (see peer_chancy.queue).
    No chains: a job has no documented way to reach the Chancy app it runs under."""

    kinds: ClassVar[tuple[str, ...]] = ()
    chancy: Any = None

    def install(self) -> None:
        async def go() -> None:
            from chancy import Chancy  # type: ignore[import-untyped]

            from bench import peer_chancy

            async with Chancy(self.url) as chancy:
                await chancy.migrate()
                await chancy.declare(peer_chancy.queue())

        asyncio.run(go())

    async def aopen(self) -> None:
        from chancy import Chancy

        self.chancy = Chancy(self.url)
        await self.chancy.__aenter__()

    async def aclose(self) -> None:
        await self.chancy.__aexit__(None, None, None)

    def worker_cmd(self) -> list[str]:
        return [sys.executable, "-m", "bench.peer_chancy"]

    def env(self) -> dict[str, str]:
        env = super().env()
        env[DSN_ENV] = self.url
        return env

    async def abulk(self, batches: int, size: int) -> float:
        from bench.peer_chancy import noop

        async def once() -> None:
            jobs = [noop.job.with_kwargs(i=i) for i in range(size)]
            async for _ in self.chancy.push_many(jobs):  # yields the references
                pass

        return await _bulk_rate(batches, size, once)

    async def asingle(self, n: int) -> float:
        from bench.peer_chancy import noop

        return await _single_rate(n, lambda i: self.chancy.push(noop.job.with_kwargs(i=i)))

    async def aping(self, i: int) -> None:
        from bench.peer_chancy import ping

        await self.chancy.push(ping.job.with_kwargs(i=i))

    def unfinished_sql(self) -> str:
        return (
            "SELECT count(*) FROM chancy_jobs WHERE queue = 'cmp'"
            " AND state IN ('pending', 'retrying', 'running')"
        )

    def pending_sql(self) -> str:
        return (
            "SELECT EXISTS (SELECT 1 FROM chancy_jobs WHERE queue = 'cmp'"
            " AND state IN ('pending', 'retrying', 'running'))"
        )

    def started_sql(self) -> str:
        return (
            "SELECT EXISTS (SELECT 1 FROM chancy_jobs WHERE queue = 'cmp' AND state = 'running')"
            " OR EXISTS (SELECT 1 FROM chancy_jobs WHERE queue = 'cmp'"
            " AND completed_at >= %(since)s)"
        )

    def purge_sql(self) -> str:
        return "DELETE FROM chancy_jobs WHERE queue = 'cmp' AND state = 'pending'"

    def load_backlog(self, conn: psycopg.Connection[Any], n: int) -> None:
        conn.execute(
            "INSERT INTO chancy_jobs (id, queue, func, kwargs)"
            " SELECT gen_random_uuid(), 'other', 'bench.peer_chancy.noop',"
            " jsonb_build_object('i', g) FROM generate_series(1, %s) AS g",
            (n,),
        )

    def vacuum(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("VACUUM (ANALYZE) chancy_jobs")


class AwaLib(Lib):
    """awa-pg: `AsyncClient(url)`, `client.insert` (one job) and `insert_many_copy` (its
    bulk COPY insert; `enqueue_many_copy`, the faster one, needs queue storage already
    active, which a fresh install has only once a worker ran), its migrations through
    `python -m awa migrate`, and the worker program its README shows (bench.peer_awa.main) with
    `client.start()` at its defaults. Its queue storage is append-only partitions, so the
    drain probes read its `awa.jobs` view (dearer than the others' index probes) and
    leftovers (a capped drain's) go through `drain_queue`, its admin call for them."""

    client: Any = None

    def install(self) -> None:
        subprocess.run(
            [sys.executable, "-m", "awa", "--database-url", self.url, "migrate"],
            check=True,
            capture_output=True,
        )

    async def aopen(self) -> None:
        from awa import AsyncClient

        self.client = AsyncClient(self.url)

    async def aclose(self) -> None:
        await self.client.close()

    def worker_cmd(self) -> list[str]:
        return [sys.executable, "-m", "bench.peer_awa"]

    def env(self) -> dict[str, str]:
        env = super().env()
        env[DSN_ENV] = self.url
        return env

    async def abulk(self, batches: int, size: int) -> float:
        from bench.peer_awa import Noop

        async def once() -> None:
            await self.client.insert_many_copy([Noop(i) for i in range(size)], queue=QUEUE)

        return await _bulk_rate(batches, size, once)

    async def asingle(self, n: int) -> float:
        from bench.peer_awa import Noop

        return await _single_rate(n, lambda i: self.client.insert(Noop(i), queue=QUEUE))

    async def aping(self, i: int) -> None:
        from bench.peer_awa import Ping

        await self.client.insert(Ping(i), queue=QUEUE)

    async def astart_chains(self, kind: str, n: int) -> None:
        from bench.peer_awa import Chain

        await self.client.insert_many_copy([Chain(i, 0) for i in range(n)], queue=QUEUE)

    async def astart_chain(self, kind: str, i: int) -> None:
        from bench.peer_awa import Chain

        await self.client.insert(Chain(i, 0), queue=QUEUE)

    def unfinished_sql(self) -> str:
        return (
            "SELECT count(*) FROM awa.jobs WHERE queue = 'cmp'"
            " AND state IN ('available', 'running')"
        )

    def pending_sql(self) -> str:
        return (
            "SELECT EXISTS (SELECT 1 FROM awa.jobs WHERE queue = 'cmp'"
            " AND state IN ('available', 'running'))"
        )

    def started_sql(self) -> str:
        return (
            "SELECT EXISTS (SELECT 1 FROM awa.jobs WHERE queue = 'cmp'"
            " AND (state = 'running' OR finalized_at >= %(since)s))"
        )

    def purge_sql(self) -> str:
        raise NotImplementedError  # purge() goes through the client

    def purge(self, conn: psycopg.Connection[Any]) -> None:
        self.session(lambda: self.client.drain_queue(QUEUE))  # its admin call for it

    def load_backlog(self, conn: psycopg.Connection[Any], n: int) -> None:
        conn.execute(
            "SELECT count(awa.insert_job_compat('other_noop', 'other', jsonb_build_object('i', g)))"
            " FROM generate_series(1, %s) AS g",
            (n,),
        )

    def vacuum(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("VACUUM (ANALYZE)")


class DbosLib(Lib):
    """DBOS: `DBOSClient(system_database_url=...)` and its `enqueue_async` (one workflow
    a call: it has no batch enqueue, so no bulk row; step loads enqueue one by one), its
    schema through `dbos migrate`, and an application process as its docs show
    (bench.peer_dbos.main: `DBOS.register_queue(name)` at its defaults, polling every
    second)."""

    steps: ClassVar[tuple[str, ...]] = tuple(s for s in STEPS if s != "bulk")
    client: Any = None

    def install(self) -> None:
        command = [_script("dbos"), "migrate", "-s", self.url]
        subprocess.run(command, check=True, capture_output=True)

    async def aopen(self) -> None:
        from dbos import DBOSClient

        self.client = DBOSClient(system_database_url=self.url)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.client.destroy)

    def worker_cmd(self) -> list[str]:
        return [sys.executable, "-m", "bench.peer_dbos"]

    def env(self) -> dict[str, str]:
        env = super().env()
        env[DSN_ENV] = self.url
        return env

    async def _enqueue(self, workflow: str, *args: int) -> None:
        await self.client.enqueue_async({"queue_name": QUEUE, "workflow_name": workflow}, *args)

    async def aload(self, n: int) -> None:
        # untimed: 20 calls at a time (each runs in a thread: DBOSClient's own way)
        for start in range(0, n, 20):
            calls = (self._enqueue("noop", i) for i in range(start, min(start + 20, n)))
            await asyncio.gather(*calls)

    async def asingle(self, n: int) -> float:
        return await _single_rate(n, lambda i: self._enqueue("noop", i))

    async def aping(self, i: int) -> None:
        await self._enqueue("ping", i)

    async def astart_chains(self, kind: str, n: int) -> None:
        for i in range(n):
            await self._enqueue("chain", i, 0)

    async def astart_chain(self, kind: str, i: int) -> None:
        await self._enqueue("chain", i, 0)

    def unfinished_sql(self) -> str:
        return (
            "SELECT count(*) FROM dbos.workflow_status WHERE queue_name = 'cmp'"
            " AND status IN ('ENQUEUED', 'PENDING')"
        )

    def pending_sql(self) -> str:
        return (
            "SELECT EXISTS (SELECT 1 FROM dbos.workflow_status WHERE queue_name = 'cmp'"
            " AND status IN ('ENQUEUED', 'PENDING'))"
        )

    def started_sql(self) -> str:
        return (
            "SELECT EXISTS (SELECT 1 FROM dbos.workflow_status WHERE queue_name = 'cmp'"
            " AND status = 'PENDING') OR EXISTS (SELECT 1 FROM dbos.workflow_status"
            " WHERE completed_at >= extract(epoch FROM %(since)s::timestamptz) * 1000)"
        )

    def purge_sql(self) -> str:
        # with the workers stopped, a PENDING workflow is one they left: the next DBOS
        # process would recover it (and a recovered chain would ping into the next step)
        return (
            "DELETE FROM dbos.workflow_status WHERE queue_name = 'cmp'"
            " AND status IN ('ENQUEUED', 'PENDING')"
        )

    def load_backlog(self, conn: psycopg.Connection[Any], n: int) -> None:
        conn.execute(
            "INSERT INTO dbos.workflow_status (workflow_uuid, status, name, queue_name)"
            " SELECT gen_random_uuid()::text, 'ENQUEUED', 'noop', 'other'"
            " FROM generate_series(1, %s) AS g",
            (n,),
        )

    def vacuum(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("VACUUM (ANALYZE) dbos.workflow_status")


FLOOR_DDL = """
CREATE TABLE jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, task text NOT NULL,
                   state text NOT NULL DEFAULT 'queued', i integer NOT NULL);
CREATE INDEX jobs_queued ON jobs (id) WHERE state = 'queued';
CREATE INDEX jobs_running ON jobs (id) WHERE state = 'running'
"""
# one statement in autocommit (one round trip): the insert, its NOTIFY, the commit
FLOOR_ENQUEUE = (
    "WITH j AS (INSERT INTO jobs (task, i) VALUES (%s, %s) RETURNING id)"
    " SELECT pg_notify('jobs', '')"
)
# a bulk enqueue: the jobs and one NOTIFY (a worker already idle wakes, as for any enqueue)
FLOOR_LOAD = (
    "WITH j AS (INSERT INTO jobs (task, i) SELECT 'noop', g FROM generate_series(1, %s) AS g)"
    " SELECT pg_notify('jobs', '')"
)
# The claim commits without waiting for its WAL flush, as pgqueue's claim does (a claim
# lost in a crash leaves its jobs queued, to run again); the done mark waits for it.
FLOOR_CLAIM = """
UPDATE jobs SET state = 'running'
 WHERE id IN (SELECT id FROM jobs WHERE state = 'queued' ORDER BY id
              FOR UPDATE SKIP LOCKED LIMIT %s)
   AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
RETURNING id, task, i
"""
FLOOR_DONE = "UPDATE jobs SET state = 'done' WHERE id = ANY(%s)"


def floor_worker() -> None:
    """The floor's worker (FloorLib), one loop on one autocommit connection: claim up to
    BATCH queued jobs (FLOOR_CLAIM: one UPDATE ... FOR UPDATE SKIP LOCKED), run them
    (a ping's body sends its ping; a no-op does nothing), mark them done (FLOOR_DONE: a
    second UPDATE, the outcome a real queue must record), and claim again at once while
    jobs remain; with none left, wait on LISTEN for an enqueue's NOTIFY (psycopg keeps
    those that arrive between two waits)."""
    with psycopg.connect(os.environ[DSN_ENV], autocommit=True) as conn:
        conn.execute("LISTEN jobs")
        while True:
            rows = conn.execute(FLOOR_CLAIM, (BATCH,), prepare=True).fetchall()
            if not rows:
                for _ in conn.notifies(stop_after=1):
                    pass
                continue
            for _, task, i in rows:
                if task == "ping":
                    _ping_back(i)
            conn.execute(FLOOR_DONE, ([row[0] for row in rows],), prepare=True)


class FloorLib(Lib):
    """The least a queue's work can cost, with bare psycopg and a table of its own
    (FLOOR_DDL: the job, its state, an index each for queued and running jobs).
    Enqueue: a bare psycopg AsyncConnection in the same event loop as the others'
    calls, one statement in autocommit per job (FLOOR_ENQUEUE: INSERT, NOTIFY, COMMIT;
    the single-enqueue step and the pickup pings). Worker: one process, floor_worker's
    loop (claim a batch of BATCH with SKIP LOCKED, run, mark done; LISTEN when idle) for
    the drains (process, two, deep, defaults: it has no options, so its defaults are
    this) and the pickup. It takes no bulk, chain or backlog step; its untimed loads
    are one INSERT ... SELECT and its NOTIFY (FLOOR_LOAD)."""

    steps: ClassVar[tuple[str, ...]] = ("single", "process", "two", "deep", "pickup", "defaults")
    aconn: Any = None

    def install(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for statement in FLOOR_DDL.split(";"):
                conn.execute(statement)

    async def aopen(self) -> None:
        self.aconn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def aclose(self) -> None:
        await self.aconn.close()

    def worker_cmd(self) -> list[str]:
        return [sys.executable, "-c", "from bench.compare import floor_worker; floor_worker()"]

    async def asingle(self, n: int) -> float:
        return await _single_rate(
            n, lambda i: self.aconn.execute(FLOOR_ENQUEUE, ("noop", i), prepare=True)
        )

    async def aping(self, i: int) -> None:
        await self.aconn.execute(FLOOR_ENQUEUE, ("ping", i), prepare=True)

    async def aload(self, n: int) -> None:
        await self.aconn.execute(FLOOR_LOAD, (n,))

    def unfinished_sql(self) -> str:
        return (
            "SELECT (SELECT count(*) FROM jobs WHERE state = 'queued')"
            " + (SELECT count(*) FROM jobs WHERE state = 'running')"
        )

    def pending_sql(self) -> str:
        # newest first, as for pgqueue: the claims take the oldest
        return (
            "SELECT (SELECT id FROM jobs WHERE state = 'queued' ORDER BY id DESC LIMIT 1)"
            " IS NOT NULL OR EXISTS (SELECT 1 FROM jobs WHERE state = 'running')"
        )

    def started_sql(self) -> str:
        # the count only while nothing is running (before the first claim, mostly)
        return (
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'running')"
            " OR (SELECT count(*) FROM jobs WHERE state = 'queued') < %(n)s"
        )

    def purge_sql(self) -> str:
        # with the worker stopped, a running job is one it left (a capped drain's)
        return "DELETE FROM jobs WHERE state IN ('queued', 'running')"

    def vacuum(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("VACUUM (ANALYZE) jobs")


CLASSES: dict[str, type[Lib]] = {
    "pgqueue": PgqueueLib,
    "procrastinate": ProcrastinateLib,
    "pgqueuer": PgqueuerLib,
    "oban": ObanLib,
    "chancy": ChancyLib,
    "awa": AwaLib,
    "dbos": DbosLib,
    "floor": FloorLib,
}


# -- measurements ----------------------------------------------------------------------------


#: seconds between two probes of a drain (each probe is an index probe or two)
POLL = 0.01


@dataclass
class Drain:
    """A drain as the database clock saw it."""

    start: float  # epoch seconds: the first probe that saw a job gone from the queue
    end: float  # the first probe that saw none left (or the one at the cap)
    done: int  # jobs finished by then


def db_clock(conn: psycopg.Connection[Any]) -> Any:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def watch_drain(
    conn: psycopg.Connection[Any],
    lib: Lib,
    procs: list[subprocess.Popen[bytes]],
    n: int,
    since: Any,
    *,
    cap: float = float("inf"),
    timeout: float = 600.0,
    on_start: Callable[[], None] = lambda: None,
) -> Drain:
    """Watch `procs` drain the `n` unfinished jobs that were there at `since` (db_clock()
    before the workers started): lib.started_sql until a job has left the queue (then
    on_start()), then lib.pending_sql until none is left or `cap` seconds have passed,
    every POLL seconds. Both are cheap probes: the exact count (lib.unfinished_sql) read
    100,000 queued jobs in about 15 ms, and polling it took a good part of a core from
    the drain it measured. It runs only at the cap."""

    def probe(query: str, params: dict[str, Any] | None) -> tuple[float, bool]:
        row = conn.execute(
            sql.SQL("SELECT extract(epoch FROM clock_timestamp())::float8, ({})").format(
                sql.SQL(query)  # type: ignore[arg-type]
            ),
            params,
        ).fetchone()
        assert row is not None
        return float(row[0]), bool(row[1])

    started, pending = lib.started_sql(), lib.pending_sql()
    deadline = time.monotonic() + timeout
    start: float | None = None
    while time.monotonic() < deadline:
        if start is None:
            t, yes = probe(started, {"since": since, "n": n})
            if yes:
                start = t
                on_start()
        else:
            t, yes = probe(pending, None)
            if not yes:
                return Drain(start, t, n)
            if t - start >= cap:
                return Drain(start, t, n - unfinished(conn, lib))
        _check_alive(lib, procs)
        time.sleep(POLL)
    raise TimeoutError(f"{lib.name}: queue not drained in {timeout}s")


def unfinished(conn: psycopg.Connection[Any], lib: Lib) -> int:
    row = conn.execute(lib.unfinished_sql()).fetchone()  # type: ignore[call-overload]
    assert row is not None
    return int(row[0])


def settle(conn: psycopg.Connection[Any]) -> None:
    """Write out what earlier steps left dirty (CHECKPOINT) before a timed step, so that
    the server's own flushing of them (a checkpoint's writes and fsyncs, which slow every
    commit's WAL flush) does not fall into one library's measurement and not another's.
    Needs a superuser or pg_checkpoint (PostgreSQL 15+); without either it does nothing."""
    global _settle_refused
    if _settle_refused:
        return
    try:
        conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        _settle_refused = True
        print("  (no CHECKPOINT before timed steps: the role may not run it)", flush=True)


_settle_refused = False


def drain_rate(lib: Lib, cap: float, workers: int = 1, timeout: float = 600.0) -> tuple[float, int]:
    """Start `workers` worker processes and watch them drain what is queued (watch_drain),
    at most `cap` seconds after the first job left the queue; (jobs/s, jobs done). The
    library's tables are vacuumed and analyzed before (then settle()), and after the
    leftovers are deleted."""
    with psycopg.connect(lib.dsn, autocommit=True) as conn:
        # Autovacuum is off on our server: do what it would have done by now (after the
        # load, and after the drain below), so that neither dead rows nor stale
        # statistics of an earlier step slow this one.
        lib.vacuum(conn)
        settle(conn)
        n, since = unfinished(conn, lib), db_clock(conn)
        with lib.workers(workers) as procs:
            d = watch_drain(conn, lib, procs, n, since, cap=cap, timeout=timeout)
        lib.purge(conn)
        lib.vacuum(conn)
        return d.done / max(d.end - d.start, 1e-3), d.done


def _check_alive(lib: Lib, procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is not None:
            raise RuntimeError(f"{lib.name}: worker exited with {proc.returncode}")


class Pings:
    """The UDP socket the task bodies report to (_ping_back): (kind, i) -> the time.time()
    the body sent, same host clock as this process."""

    def __init__(self, lib: Lib) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.001)
        lib.udp_port = self.sock.getsockname()[1]
        self.got: dict[tuple[str, int], float] = {}

    def collect(self, until: float, want: tuple[str, int] | None = None) -> None:
        """Receive until time.monotonic() >= until, or until `want` has arrived."""
        while want is None or want not in self.got:
            try:
                data = self.sock.recv(128)
            except TimeoutError:
                if time.monotonic() >= until:
                    return
                continue
            kind, i, t = data.decode().split()
            self.got[kind, int(i)] = float(t)

    def drain(self) -> None:
        """Take what has arrived, without waiting (the times are the senders')."""
        while True:
            try:
                data = self.sock.recv(128, socket.MSG_DONTWAIT)
            except (BlockingIOError, TimeoutError):
                return
            kind, i, t = data.decode().split()
            self.got[kind, int(i)] = float(t)

    async def acollect(self, until: float, want: tuple[str, int]) -> None:
        """collect() for a step's event loop: until `want` has arrived or until."""
        while True:
            self.drain()
            if want in self.got or time.monotonic() >= until:
                return
            await asyncio.sleep(0.0005)

    def times(self, kind: str) -> list[float]:
        return [t for (k, _), t in self.got.items() if k == kind]

    def close(self) -> None:
        self.sock.close()


@dataclass
class Pickups:
    """One pickup series, ms per ping: from the enqueue call to the task's start (`total`),
    split at the enqueue's return: the call itself (its statement and commit) and what
    follows it (NOTIFY delivery, the claim, the task's start)."""

    total: list[float]
    call: list[float]
    after: list[float]
    lost: int


def pickup(lib: Lib, n: int, warmup: int, seed: int) -> Pickups:
    """An idle worker; enqueue a ping every 15-35 ms; ms from enqueue call to task start,
    and how many pings had not run STRAGGLERS seconds after the last was sent. Those count
    as that wait (a lower bound, so they land in the tail, not out of the sample)."""
    pings = Pings(lib)
    sent: dict[int, float] = {}
    returned: dict[int, float] = {}
    rng = random.Random(seed)
    with psycopg.connect(lib.dsn, autocommit=True) as conn:
        settle(conn)

    async def series() -> None:
        # all the pings from one event loop, as an async app enqueues
        for i in range(n + warmup):
            sent[i] = time.time()
            await lib.aping(i)
            returned[i] = time.time()
            await asyncio.sleep(rng.uniform(0.015, 0.035))
            pings.drain()

    try:
        with lib.workers(1):
            time.sleep(4.0)  # start-up and LISTEN
            lib.session(series)
            deadline = time.monotonic() + STRAGGLERS
            for i in sent:
                if time.monotonic() >= deadline:
                    break
                pings.collect(deadline, want=("p", i))
    finally:
        pings.close()
    given_up = time.time()
    got = {i: t for (kind, i), t in pings.got.items() if kind == "p"}
    lost = [i for i in range(warmup, n + warmup) if i not in got]
    if len(lost) > n // 2:
        raise RuntimeError(f"{lib.name}: {len(lost)} of {n} pings never ran")
    measured = range(warmup, n + warmup)
    return Pickups(
        total=[1000 * (got.get(i, given_up) - sent[i]) for i in measured],
        call=[1000 * (returned[i] - sent[i]) for i in measured],
        after=[1000 * (got[i] - returned[i]) for i in measured if i in got],
        lost=len(lost),
    )


STRAGGLERS = 10.0  # seconds pickup() waits for the last pings


def chain_rate(lib: Lib, kind: str, n: int, cap: float, timeout: float = 300.0) -> float:
    """`n` chains (or workflows) enqueued with no worker running, then one worker process:
    chains finished / (last end - first start), from the task bodies' pings; counting
    stops `cap` seconds after the first start. Leftovers are deleted."""
    pings = Pings(lib)
    try:
        lib.start_chains(kind, n)
        with lib.workers(1) as procs:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                pings.collect(time.monotonic() + 0.05)
                _check_alive(lib, procs)
                starts, ends = pings.times("s"), pings.times("e")
                if len(ends) >= n or (starts and time.time() - min(starts) >= cap):
                    break
            else:
                raise TimeoutError(f"{lib.name}: {kind}: no chain started in {timeout}s")
        with psycopg.connect(lib.dsn, autocommit=True) as conn:
            lib.purge(conn)
    finally:
        pings.close()
    if not ends:
        return 0.0
    return len(ends) / max(max(ends) - min(starts), 1e-3)


def chain_latency(lib: Lib, kind: str, n: int, warmup: int, seed: int) -> tuple[list[float], int]:
    """An idle worker; one chain at a time, started 15-35 ms after the previous one
    ended (or 10 s after it started): ms from the enqueue call to the last task's body,
    and how many had not ended 10 s after their start."""
    pings = Pings(lib)
    sent: dict[int, float] = {}
    rng = random.Random(seed)

    async def series() -> None:
        for i in range(n + warmup):
            sent[i] = time.time()
            await lib.astart_chain(kind, i)
            await pings.acollect(time.monotonic() + 10.0, want=("e", i))
            await asyncio.sleep(rng.uniform(0.015, 0.035))

    try:
        with lib.workers(1):
            time.sleep(4.0)  # start-up and LISTEN
            lib.session(series)
    finally:
        pings.close()
    # a chain that had not ended 10 s after its start counts as those 10 s (a lower bound,
    # in the tail, as pickup() counts its stragglers); a ping from before its chain was
    # sent (one left by an earlier step) does not count as its end
    got = {i: t for (k, i), t in pings.got.items() if k == "e" and t >= sent.get(i, t)}
    measured = range(warmup, n + warmup)
    lost = sum(1 for i in measured if i not in got)
    if lost > n // 2:
        raise RuntimeError(f"{lib.name}: {kind}: {lost} of {n} chains never ended")
    return [1000 * (got[i] - sent[i]) if i in got else 10_000.0 for i in measured], lost


@dataclass
class Samples:
    bulk: list[float] = field(default_factory=list)
    single: list[float] = field(default_factory=list)
    bulk_sync: list[float] = field(default_factory=list)
    single_sync: list[float] = field(default_factory=list)
    process: list[float] = field(default_factory=list)
    process2: list[float] = field(default_factory=list)
    process2_ratio: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p95: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    call_p50: list[float] = field(default_factory=list)
    after_p50: list[float] = field(default_factory=list)
    after_p99: list[float] = field(default_factory=list)
    chain: list[float] = field(default_factory=list)
    chain_p50: list[float] = field(default_factory=list)
    chain_p95: list[float] = field(default_factory=list)
    flow: list[float] = field(default_factory=list)
    flow_p50: list[float] = field(default_factory=list)
    flow_p95: list[float] = field(default_factory=list)
    deep: list[float] = field(default_factory=list)
    deep2: list[float] = field(default_factory=list)
    deep_c100: list[float] = field(default_factory=list)
    deep2_c100: list[float] = field(default_factory=list)
    backlog: list[float] = field(default_factory=list)
    backlog_ratio: list[float] = field(default_factory=list)
    defaults: list[float] = field(default_factory=list)
    defaults_api: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def one_repeat(lib: Lib, args: argparse.Namespace, r: int, s: Samples) -> None:
    def log(message: str) -> None:
        print(f"  [{lib.name} r{r + 1}] {message}", flush=True)

    steps = set(args.only) & set(lib.steps or STEPS)
    if "process" in steps:  # it drains what bulk and single enqueued
        steps |= {"bulk", "single"}
        steps &= set(lib.steps or STEPS)
    lib.fresh()
    try:
        if "bulk" in steps:
            s.bulk.append(lib.bulk(args.batches, 1000))
            log(f"bulk (async, one loop) {s.bulk[-1]:,.0f} jobs/s")
            with contextlib.suppress(NotImplementedError):
                s.bulk_sync.append(lib.bulk_sync(args.batches, 1000))
                log(f"bulk (sync API) {s.bulk_sync[-1]:,.0f} jobs/s")
        elif "process" in steps:  # no batch API: as many jobs for the drain, one by one
            lib.load((args.batches + 2) * 1000)
        if "single" in steps:
            s.single.append(lib.single(args.single))
            log(f"single (async, one loop) {s.single[-1]:,.0f} jobs/s")
            with contextlib.suppress(NotImplementedError):
                s.single_sync.append(lib.single_sync(args.single))
                log(f"single (sync API) {s.single_sync[-1]:,.0f} jobs/s")
        if "process" in steps:
            rate, n = drain_rate(lib, args.cap)
            s.process.append(rate)
            log(f"process {rate:,.0f} jobs/s ({n:,} jobs)")
        elif steps & {"bulk", "single"}:  # what they enqueued is not for the next steps
            with psycopg.connect(lib.dsn, autocommit=True) as conn:
                lib.purge(conn)
        if args.two_runs and "two" in steps:
            lib.load(args.two_runs)
            rate, n = drain_rate(lib, args.cap, workers=2)
            s.process2.append(rate)
            s.process2_ratio.append(rate / s.process[-1])
            log(f"process, 2 workers {rate:,.0f} jobs/s ({n:,} jobs)")
        if args.deep and "deep" in steps:
            # a queue that stays deep for the whole drain: steady state, not a burst; for
            # pgqueue once more at the concurrency of earlier sessions (claims of 50)
            drains: list[tuple[str, int, int | None]] = [("deep", 1, None), ("deep2", 2, None)]
            if isinstance(lib, PgqueueLib):
                drains += [("deep_c100", 1, CONCURRENCY), ("deep2_c100", 2, CONCURRENCY)]
            for kind, workers, concurrency in drains:
                if concurrency is not None:
                    assert isinstance(lib, PgqueueLib)
                    lib.concurrency = concurrency
                try:
                    lib.load(args.deep)
                    rate, n = drain_rate(lib, args.cap, workers=workers)
                finally:
                    if isinstance(lib, PgqueueLib):
                        lib.concurrency = PGQUEUE_CONCURRENCY
                getattr(s, kind).append(rate)
                setting = f", --concurrency {concurrency}" if concurrency else ""
                log(f"deep queue, {workers} worker(s){setting}: {rate:,.0f} jobs/s ({n:,} jobs)")
        if "pickup" in steps:
            picked = pickup(lib, args.pickups, 10, args.seed + r)
            lat, lost = picked.total, picked.lost
            for q, dest in ((50, s.p50), (95, s.p95), (99, s.p99)):
                dest.append(percentile(lat, q))
            s.call_p50.append(percentile(picked.call, 50))
            s.after_p50.append(percentile(picked.after, 50))
            s.after_p99.append(percentile(picked.after, 99))
            log(
                f"pickup p50 {s.p50[-1]:.2f} p95 {s.p95[-1]:.2f} p99 {s.p99[-1]:.2f} ms"
                f" (enqueue call p50 {s.call_p50[-1]:.2f}, after it p50 {s.after_p50[-1]:.2f}"
                f" p99 {s.after_p99[-1]:.2f})"
            )
            if lost:
                s.notes.append(
                    f"r{r + 1}: {lost} of {args.pickups} pickup pings had not run"
                    f" {STRAGGLERS:.0f} s after the last was sent"
                )
                log(s.notes[-1])
        for kind in lib.kinds if args.chains and "chains" in steps else ():
            rate = chain_rate(lib, kind, args.chains, args.cap)
            lat, lost = chain_latency(lib, kind, args.chain_pings, 5, r)
            if lost:
                s.notes.append(
                    f"r{r + 1}: {lost} of {args.chain_pings} {kind}s had not ended 10 s after"
                    " their start (counted as 10 s)"
                )
                log(s.notes[-1])
            getattr(s, kind).append(rate)
            getattr(s, f"{kind}_p50").append(percentile(lat, 50))
            getattr(s, f"{kind}_p95").append(percentile(lat, 95))
            log(
                f"{kind}: {rate:,.1f}/s; end-to-end p50 {percentile(lat, 50):.1f}"
                f" p95 {percentile(lat, 95):.1f} ms"
            )
        for row in lib.default_rows if args.defaults and "defaults" in steps else ():
            lib.session(lambda row=row: lib.aload_defaults(args.defaults, row))  # type: ignore[misc]
            lib.defaults = True
            if isinstance(lib, PgqueueLib):
                lib.default_row = row
            try:
                rate, n = drain_rate(lib, args.cap)
            finally:
                lib.defaults = False
            getattr(s, row).append(rate)
            log(f"out of the box ({row}): {rate:,.0f} jobs/s ({n:,} jobs)")
        if args.backlog and "backlog" in steps:
            t0 = time.perf_counter()
            with psycopg.connect(lib.dsn, autocommit=True) as conn:
                lib.load_backlog(conn, args.backlog)
                lib.vacuum(conn)
            took = time.perf_counter() - t0
            lib.load(args.backlog_runs)
            rate, n = drain_rate(lib, args.cap)
            s.backlog.append(rate)
            same_size = s.deep if args.deep == args.backlog_runs and s.deep else s.process
            s.backlog_ratio.append(rate / same_size[-1])
            log(
                f"backlog: loaded {args.backlog:,} in {took:.1f}s; process {rate:,.0f} jobs/s"
                f" ({n:,} jobs), {s.backlog_ratio[-1]:.2f}x no backlog"
            )
    finally:
        lib.close()
        lib.drop()


# -- output ----------------------------------------------------------------------------------

ROWS = (
    ("bulk", "bulk enqueue, batches of 1,000 (async API, one event loop)", "jobs/s", True),
    ("single", "single enqueue, 1 per transaction (async API, one loop)", "jobs/s", True),
    ("bulk_sync", "bulk enqueue, batches of 1,000 (sync API)", "jobs/s", True),
    ("single_sync", "single enqueue, 1 per transaction (sync API)", "jobs/s", True),
    ("process", "no-op processing, 1 worker process", "jobs/s", True),
    ("process2", "no-op processing, 2 worker processes", "jobs/s", True),
    ("process2_ratio", "2 processes / 1 process, same repeat", "x", True),
    ("deep", "no-op processing, 60k jobs queued, 1 worker process", "jobs/s", True),
    ("deep2", "no-op processing, 60k jobs queued, 2 worker processes", "jobs/s", True),
    ("deep_c100", "same, 1 worker process, pgqueue --concurrency 100", "jobs/s", True),
    ("deep2_c100", "same, 2 worker processes, pgqueue --concurrency 100", "jobs/s", True),
    ("p50", "idle pickup p50", "ms", False),
    ("p95", "idle pickup p95", "ms", False),
    ("p99", "idle pickup p99", "ms", False),
    ("call_p50", "idle pickup: the enqueue call, p50", "ms", False),
    ("after_p50", "idle pickup: from the enqueue's return to the task, p50", "ms", False),
    ("after_p99", "idle pickup: from the enqueue's return to the task, p99", "ms", False),
    ("chain", "4-task chain (each task enqueues the next), 1 worker", "chains/s", True),
    ("chain_p50", "4-task chain end to end, idle worker, p50", "ms", False),
    ("chain_p95", "4-task chain end to end, idle worker, p95", "ms", False),
    ("flow", "4-step workflow (pgqueue only), 1 worker", "workflows/s", True),
    ("flow_p50", "4-step workflow end to end, idle worker, p50", "ms", False),
    ("flow_p95", "4-step workflow end to end, idle worker, p95", "ms", False),
    ("defaults", "no-op processing, 50k jobs, defaults (pgqueue: CLI)", "jobs/s", True),
    ("defaults_api", "same, pgqueue worker built with the Python API", "jobs/s", True),
    ("backlog", "processing, 500k backlog in another queue", "jobs/s", True),
    ("backlog_ratio", "backlog / no backlog", "x", True),
)


def _f(v: float) -> str:
    if v != v:
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def markdown(results: dict[str, Samples], args: argparse.Namespace) -> str:
    libs = list(results)
    head = ["measure", "unit", *libs]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for key, label, unit, _ in ROWS:
        if not any(getattr(results[lib], key) for lib in libs):
            continue  # a step not run (--only)
        if key.startswith("backlog"):
            label = label.replace("500k", f"{args.backlog // 1000}k")
        if key in ("defaults", "defaults_api"):
            label = label.replace("50k", f"{args.defaults // 1000}k")
        cells = []
        for lib in libs:
            vals: list[float] = getattr(results[lib], key)
            runs = " / ".join(_f(v) for v in vals)
            cells.append(f"**{_f(med(vals))}** ({runs})" if vals else "-")
        lines.append("| " + " | ".join([label, unit, *cells]) + " |")
    notes = [f"- {lib}: {note}" for lib in libs for note in results[lib].notes]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


#: pgqueue's rows against the floor's: (pgqueue's row, the floor's row, label, target or
#: None for a ratio only reported). Issue #42: single enqueue >= 0.95x the floor's, the
#: drain at concurrency 100 >= 0.6x, and the ratio at defaults reported.
FLOOR_RATIOS: tuple[tuple[str, str, str, float | None], ...] = (
    ("single", "single", "single enqueue (enqueue_async, one loop)", 0.95),
    ("deep_c100", "deep", "drain, 60k queued, 1 worker, --concurrency 100", 0.6),
    ("deep2_c100", "deep2", "drain, 60k queued, 2 workers, --concurrency 100", None),
    ("defaults", "defaults", "drain out of the box (CLI, no options)", None),
    ("defaults_api", "defaults", "drain out of the box (Python API, no options)", None),
    ("process", "process", "drain, 1 worker, --concurrency 200", None),
    ("deep", "deep", "drain, 60k queued, 1 worker, --concurrency 200", None),
    ("process2", "process2", "drain, 2 workers, --concurrency 200", None),
    ("deep2", "deep2", "drain, 60k queued, 2 workers, --concurrency 200", None),
)


def floor_ratios(results: dict[str, Samples]) -> list[dict[str, Any]]:
    """pgqueue's rate over the floor's for each of FLOOR_RATIOS both measured: the ratio of
    each repeat (the two in the same repeat) and their median; `verdict` PASS/FAIL
    against the target, or INFO."""
    ours, floor = results.get("pgqueue"), results.get("floor")
    if ours is None or floor is None:
        return []
    out = []
    for mine_key, floor_key, label, target in FLOOR_RATIOS:
        mine, least = getattr(ours, mine_key), getattr(floor, floor_key)
        per_repeat = [a / b for a, b in zip(mine, least, strict=False) if b]
        if not per_repeat:
            continue
        ratio = statistics.median(per_repeat)
        verdict = "INFO" if target is None else "PASS" if ratio >= target else "FAIL"
        out.append(
            {
                "measure": label,
                "pgqueue": mine_key,
                "floor": floor_key,
                "ratio": ratio,
                "repeats": per_repeat,
                "pgqueue_median": med(mine),
                "floor_median": med(least),
                "target": target,
                "verdict": verdict,
            }
        )
    return out


def verdicts(results: dict[str, Samples]) -> list[tuple[str, str, str]]:
    """(target, measured, PASS/FAIL) for pgqueue against the better peer."""
    ours = results["pgqueue"]
    peers = [results[x] for x in results if x not in ("pgqueue", "floor")]
    out = []
    for key, label in (
        ("process", "processing throughput, 1 worker process"),
        ("process2", "processing throughput, 2 worker processes"),
        ("deep", "processing throughput, 60k jobs queued, 1 worker process"),
        ("deep2", "processing throughput, 60k jobs queued, 2 worker processes"),
        ("bulk", "bulk enqueue"),
    ):
        theirs = [med(getattr(p, key)) for p in peers if getattr(p, key)]
        if not getattr(ours, key) or not theirs:
            continue
        best, mine = max(theirs), med(getattr(ours, key))
        out.append(
            (
                f"{label} >= 2x the better peer",
                f"{_f(mine)} vs {_f(best)} jobs/s = {mine / best:.2f}x",
                "PASS" if mine >= 2 * best else "FAIL",
            )
        )
    pgqueuer = results.get("pgqueuer")
    if pgqueuer is not None and ours.single and pgqueuer.single:
        mine, theirs_ = med(ours.single), med(pgqueuer.single)
        out.append(
            (
                "single enqueue (async, one loop) >= 1.2x pgqueuer's",
                f"{_f(mine)} vs {_f(theirs_)} jobs/s = {mine / theirs_:.2f}x",
                "PASS" if mine >= 1.2 * theirs_ else "FAIL",
            )
        )
    best_defaults = [med(p.defaults) for p in peers if p.defaults]
    for key, how in (("defaults", "CLI"), ("defaults_api", "Python API")):
        if not getattr(ours, key) or not best_defaults:
            continue
        mine, theirs_ = med(getattr(ours, key)), max(best_defaults)
        out.append(
            (
                f"out of the box ({how}, no options) >= 2.5x the best peer's defaults",
                f"{_f(mine)} vs {_f(theirs_)} jobs/s = {mine / theirs_:.2f}x",
                "PASS" if mine >= 2.5 * theirs_ else "FAIL",
            )
        )
    if pgqueuer is not None and ours.p50 and pgqueuer.p50:
        for key in ("p50", "p99"):
            mine, theirs_ = med(getattr(ours, key)), med(getattr(pgqueuer, key))
            out.append(
                (
                    f"idle pickup {key} <= 0.8x pgqueuer's",
                    f"{mine:.2f} vs {theirs_:.2f} ms = {mine / theirs_:.2f}x",
                    "PASS" if mine <= 0.8 * theirs_ else "FAIL",
                )
            )
    floor = results.get("floor")
    if floor is not None and ours.p50 and floor.p50:
        for key in ("p50", "p95", "p99"):
            mine, least = med(getattr(ours, key)), med(getattr(floor, key))
            out.append(
                (
                    f"idle pickup {key} over the floor (bare INSERT+NOTIFY, LISTEN-side claim)",
                    f"{mine:.2f} vs {least:.2f} ms: +{mine - least:.2f} ms, {mine / least:.2f}x",
                    "INFO",
                )
            )
    for row in floor_ratios(results):
        target = "" if row["target"] is None else f" >= {row['target']}x"
        runs = " / ".join(f"{x:.2f}" for x in row["repeats"])
        out.append(
            (
                f"{row['measure']}: pgqueue / floor (bare psycopg){target}",
                f"{_f(row['pgqueue_median'])} vs {_f(row['floor_median'])} jobs/s;"
                f" {row['ratio']:.2f}x (per repeat {runs})",
                row["verdict"],
            )
        )
    peers99 = [med(p.p99) for p in peers if p.p99]
    if ours.p99 and peers99:
        best99, mine99 = min(peers99), med(ours.p99)
        out.append(
            (
                "pickup p99 lower than every peer's",
                f"{mine99:.2f} ms vs best peer {best99:.2f} ms",
                "PASS" if mine99 < best99 else "FAIL",
            )
        )
    if ours.backlog_ratio:
        ratio = med(ours.backlog_ratio)
        out.append(
            (
                "no backlog penalty (>= 0.85x without backlog)",
                f"{ratio:.2f}x",
                "PASS" if ratio >= 0.85 else "FAIL",
            )
        )
    return out


def plot(results: dict[str, Samples], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    libs = list(results)
    panels = [
        ("bulk enqueue (jobs/s)", ["bulk", "bulk_sync"]),
        ("single enqueue (jobs/s)", ["single", "single_sync"]),
        (
            "no-op processing (jobs/s)",
            ["process", "process2", "deep", "deep2", "backlog", "defaults", "defaults_api"],
        ),
        ("idle pickup (ms, lower is better)", ["p50", "p95", "p99"]),
        ("chains, 1 worker (per s)", ["chain", "flow"]),
        (
            "chain end to end (ms, log scale, lower is better)",
            ["chain_p50", "chain_p95", "flow_p50"],
        ),
    ]
    log_scale = {"chain end to end (ms, log scale, lower is better)"}
    pickups = [med(getattr(results[lib], k)) for lib in libs for k in ("p50", "p99")]
    pickups = [v for v in pickups if v == v and v > 0]
    if pickups and max(pickups) > 50 * min(pickups):  # DBOS's polling beside a LISTEN pickup
        panels[3] = ("idle pickup (ms, log scale, lower is better)", ["p50", "p95", "p99"])
        log_scale.add(panels[3][0])
    fig, grid = plt.subplots(2, 3, figsize=(18, 9))
    axes = list(grid.flat)
    colors = {
        "pgqueue": "#2a7ab9",
        "procrastinate": "#e08a2c",
        "pgqueuer": "#5aa05a",
        "oban": "#8c5fb8",
        "awa": "#c0504d",
        "chancy": "#7f7f7f",
        "dbos": "#c9a227",
        "floor": "#333333",
    }
    for ax, (title, keys) in zip(axes, panels, strict=True):
        width = 0.8 / len(libs)
        for j, lib in enumerate(libs):
            vals = [med(getattr(results[lib], k)) for k in keys]
            xs = [i + (j - (len(libs) - 1) / 2) * width for i in range(len(keys))]
            bars = ax.bar(xs, vals, width, label=lib, color=colors.get(lib))
            ax.bar_label(bars, labels=[_f(v) for v in vals], fontsize=7, rotation=90, padding=2)
        ax.set_xticks(range(len(keys)))
        names = {
            "backlog": "1 worker,\n500k backlog",
            "process": "1 worker",
            "process2": "2 workers",
            "deep": "1 worker,\n60k queued",
            "deep2": "2 workers,\n60k queued",
            "chain": "4-task chain",
            "flow": "4-step workflow\n(pgqueue)",
            "chain_p50": "chain p50",
            "chain_p95": "chain p95",
            "flow_p50": "workflow p50\n(pgqueue)",
            "bulk": "async API",
            "bulk_sync": "sync API",
            "single": "async API",
            "single_sync": "sync API",
            "defaults": "defaults\n(pgqueue CLI)",
            "defaults_api": "defaults\n(pgqueue API)",
        }
        many = len(keys) > 4
        ax.set_xticklabels(
            [names.get(k, k) for k in keys],
            fontsize=7 if many else None,
            rotation=30 if many else 0,
        )
        ax.set_title(title, fontsize=10)
        if title in log_scale and any(
            med(getattr(results[lib], k)) > 0 for lib in libs for k in keys
        ):  # a partial run (--chains 0) has nothing to put on a log scale
            ax.set_yscale("log")
            ax.margins(y=0.5)
        else:
            ax.margins(y=0.25)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{' vs '.join(libs)} (median of repeats, same server)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--server", default=DEFAULT_SERVER)
    p.add_argument(
        "--libs",
        default=None,
        help=f"comma-separated, of {','.join(CLASSES)} (default: {','.join(LIBS)},"
        " those installed, and floor)",
    )
    p.add_argument("--batches", type=int, default=10, help="bulk: batches of 1,000 timed")
    p.add_argument("--single", type=int, default=300, help="single enqueues timed")
    p.add_argument("--pickups", type=int, default=1000, help="pickup samples per repeat")
    p.add_argument("--deep", type=int, default=60_000, help="jobs for the deep drains (0: skip)")
    p.add_argument("--two-runs", type=int, default=12_000, help="jobs for 2 workers (0: skip)")
    p.add_argument("--chains", type=int, default=1000, help="chains started at once (0: skip)")
    p.add_argument("--chain-pings", type=int, default=50, help="chain latency samples")
    p.add_argument("--backlog", type=int, default=500_000, help="jobs in another queue")
    p.add_argument(
        "--backlog-runs",
        type=int,
        default=60_000,
        help="jobs drained over it (compared with the drain of --deep jobs when equal)",
    )
    p.add_argument(
        "--defaults", type=int, default=50_000, help="jobs for the out-of-the-box drain (0: skip)"
    )
    p.add_argument(
        "--only",
        type=lambda text: [x for x in text.split(",") if x],
        default=list(STEPS),
        help=f"comma-separated steps to run, of {','.join(STEPS)} (default: all)",
    )
    p.add_argument("--cap", type=float, default=20.0, help="max seconds timed per drain")
    p.add_argument(
        "--seed", type=int, default=0, help="of the libraries' order per repeat (and pings')"
    )
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    unknown = set(args.only) - set(STEPS)
    if unknown:
        p.error(f"--only: unknown steps {', '.join(sorted(unknown))} (steps: {', '.join(STEPS)})")
    if args.libs is None:
        names = [x for x in LIBS if importlib.util.find_spec(PACKAGES.get(x, x)) is not None]
        if len(names) < len(LIBS):
            print(f"not installed, left out: {', '.join(sorted(set(LIBS) - set(names)))}")
        names.append("floor")
    else:
        names = [x for x in args.libs.split(",") if x]
    unknown_libs = set(names) - set(CLASSES)
    if unknown_libs:
        p.error(f"--libs: unknown {', '.join(sorted(unknown_libs))} (of {', '.join(CLASSES)})")
    results = {name: Samples() for name in names}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    command = "python -m bench.compare " + shlex.join(argv)
    versions = _versions()
    print(f"{command}: {versions}; load {os.getloadavg()}", flush=True)
    for r in range(args.repeat):
        order = list(names)
        random.Random(args.seed + r).shuffle(order)
        for name in order:
            one_repeat(CLASSES[name](name, args.server), args, r, results[name])
    table = markdown(results, args)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    md = [
        f"# pgqueue vs procrastinate vs pgqueuer ({started})",
        "",
        f"`{command}`; {versions}; medians of {args.repeat} repeats (runs in parentheses).",
        "",
        table,
        "",
    ]
    if "pgqueue" in results and len(results) > 1:
        md += ["| target | measured | verdict |", "| --- | --- | --- |"]
        md += [f"| {a} | {b} | **{c}** |" for a, b, c in verdicts(results)]
        for row in verdicts(results):
            print(" | ".join(row))
    (args.out / "compare.md").write_text("\n".join(md) + "\n")
    (args.out / "compare.json").write_text(
        json.dumps(
            {
                "command": command,
                "started": started,
                "versions": versions,
                "results": {k: v.__dict__ for k, v in results.items()},
                "floor_ratios": floor_ratios(results),
                "verdicts": verdicts(results) if "pgqueue" in results else [],
            },
            indent=1,
        )
    )
    plot(results, args.out / "compare.png")
    print(f"wrote {args.out / 'compare.md'}, compare.png, compare.json")
    return 0


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    # pgqueue's distribution is pgqueue-jobs (the name pgqueue is another project's)
    dists = {
        "pgqueue": "pgqueue-jobs",
        "procrastinate": "procrastinate",
        "pgqueuer": "pgqueuer",
        "oban": "oban",
        "awa": "awa-pg",
        "chancy": "chancy",
        "dbos": "dbos",
    }
    found = []
    for name, dist in dists.items():
        try:
            found.append(f"{name} {version(dist)}")
        except PackageNotFoundError:
            found.append(f"{name} not installed")
    libs = ", ".join(found)
    # the interpreter matters: on 3.12+ a pgqueue worker starts attempts eagerly
    return f"{libs}, Python {platform.python_version()}"


if __name__ == "__main__":
    sys.exit(main())
