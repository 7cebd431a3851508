"""Proof under fire: real worker processes, a real server, steady load, and one kind of
fault per scenario. Each scenario checks the invariants in docs/reliability.md and
reports one table row (pytest -s prints it; the session summary prints the table).

Short by default (a few seconds of fault per scenario, for CI); PGQUEUE_CHAOS=full runs
each fault for about a minute (scenario 8, the failover, is one kill and one promotion
either way: its standby is promoted 2 s, in full mode 5 s, after the kill):

    PGQUEUE_CHAOS=full python -m pytest tests/chaos -s
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from tests.chaos.harness import (
    FULL,
    PROFILE,
    TIMING,
    Chaos,
    PrivateServer,
    dead_tuples,
    terminate_worker_backends,
)
from tests.helpers import wait_until
from tests.replication import Replicated, replicated

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800 if FULL else 300)]


def test_sigkill_one_of_three_workers(dsn: str) -> None:
    every = 5.0 if FULL else 1.0
    kills = int(TIMING.fault // every) + 1
    with Chaos("1. SIGKILL", f"{kills}x SIGKILL 1 of 3 workers, every {every:g} s", dsn) as c:
        c.baseline()
        with c.fault():
            for i in range(kills):
                c.pace_until(c.fault_start + i * every)
                c.fleet.replace()
        c.recover()
        c.finish()


def test_terminate_worker_connections(dsn: str) -> None:
    """Kill rounds: every connection of every worker (pool, listener, lease keeper, App
    pool) terminated twice a second. Each killed idle connection must cost no failed
    operation, and an operation that loses its connection retries at once on a fresh one:
    throughput holds at half or more of the baseline and leases do not expire."""
    every = 0.5
    with (
        Chaos("2. pg_terminate_backend", f"every worker connection, every {every:g} s", dsn) as c,
        psycopg.connect(dsn, autocommit=True, application_name="chaos-fault") as killer,
    ):
        c.baseline()
        killed = rounds = 0
        with c.fault():
            tick = c.fault_start
            while time.time() < c.fault_start + TIMING.fault:
                killed += terminate_worker_backends(killer)
                rounds += 1
                tick += every
                c.pace_until(tick)
        c.recover()
        c.note(f"{rounds} kill rounds, {killed} worker connections terminated")
        row = c.finish()
    assert row.tput_during >= 0.5 * row.tput_before, (row.tput_during, row.tput_before)
    assert row.duplicates <= 0.01 * row.runs, (row.duplicates, row.runs)


def test_postgres_stopped_and_started(private_server: PrivateServer) -> None:
    outage = 10.0 if FULL else 3.0
    dsn = private_server.database("chaos_restart")
    with Chaos("3. server stop", f"pg_ctl stop -m fast, {outage:g} s down, start", dsn) as c:
        c.baseline()
        with c.fault():
            private_server.stop("fast")
            c.pace(outage)  # the outage itself
            private_server.start()
        c.recover()
        c.finish()


def test_idle_in_transaction_pins_xmin(dsn: str) -> None:
    pinned = 60.0 if FULL else 5.0
    with Chaos("4. xmin pinned", f"idle in transaction (RR, xid) for {pinned:g} s", dsn) as c:
        c.baseline()
        dead = {"before": dead_tuples(dsn)}
        pin = psycopg.connect(dsn, application_name="chaos-pin")
        pin.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        try:
            with c.fault():
                pin.execute("SELECT txid_current(), count(*) FROM pgqueue.runs")
                c.pace(pinned)  # the session sits idle in its transaction
                dead["pinned"] = dead_tuples(dsn)
                pin.rollback()
        finally:
            pin.close()
        c.recover()
        dead["after"] = dead_tuples(dsn)
        c.note(
            "pgqueue.runs n_dead_tup (vacuums so far): "
            + ", ".join(f"{when} {d['runs'][0]} ({d['runs'][1]})" for when, d in dead.items())
            + f"; after = {c.post_end - c.fault_end:.0f} s after the release"
        )
        c.finish()


class Readers:
    """`n` sessions running REPEATABLE READ transactions that scan the tables for about
    `hold` seconds each, back to back."""

    SCANS = (
        "SELECT state, count(*), max(attempt) FROM pgqueue.runs GROUP BY state",
        "SELECT count(*), max(attempt) FROM pgqueue.steps",
        "SELECT kind, count(*) FROM pgqueue.run_errors GROUP BY kind",
        "SELECT * FROM pgqueue.queue_stats",
        "SELECT kind, count(*) FROM chaos_exec GROUP BY kind",
    )

    def __init__(self, dsn: str, n: int = 4, hold: float = 1.0) -> None:
        self.dsn = dsn
        self.hold = hold
        self.halt = threading.Event()
        self.scans = 0
        self.transactions = 0
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._read, daemon=True) for _ in range(n)]

    def _read(self) -> None:
        try:
            with psycopg.connect(self.dsn, application_name="chaos-reader") as conn:
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                while not self.halt.is_set():
                    until = time.monotonic() + self.hold
                    while time.monotonic() < until and not self.halt.is_set():
                        for q in self.SCANS:
                            conn.execute(q).fetchall()
                            self.scans += 1
                    conn.commit()
                    self.transactions += 1
        except BaseException as exc:
            self.errors.append(exc)

    def __enter__(self) -> Readers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        for t in self.threads:
            t.join(30)


def test_repeatable_read_readers(dsn: str) -> None:
    with Chaos("5. RR readers", f"4 REPEATABLE READ scanners for {TIMING.fault:g} s", dsn) as c:
        c.baseline()
        with c.fault(), Readers(dsn) as readers:
            c.pace(TIMING.fault)
        assert not readers.errors, readers.errors
        c.recover()
        c.note(f"readers: {readers.transactions} transactions, {readers.scans} scans")
        c.finish()


class Hog(threading.Thread):
    """Another client that takes every free connection slot but `spare`, and takes back
    each one that frees up (every 0.1 s)."""

    def __init__(self, dsn: str, spare: int) -> None:
        super().__init__(name="chaos-hog", daemon=True)
        self.dsn = dsn
        self.spare = spare
        self.conns: list[psycopg.Connection[Any]] = []
        self.halt = threading.Event()
        self.filled = threading.Event()
        self.peak = 0
        self.min_free = 10**6

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True, application_name="chaos-hog") as probe:
            limit = int(probe.execute("SHOW max_connections").fetchone()[0])  # type: ignore[index]
            while not self.halt.is_set():
                used = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                ).fetchone()[0]  # type: ignore[index]
                free = limit - used
                self.min_free = min(self.min_free, free)
                for _ in range(free - self.spare):
                    try:
                        self.conns.append(
                            psycopg.connect(self.dsn, autocommit=True, application_name="chaos-hog")
                        )
                    except psycopg.OperationalError:
                        break
                self.peak = max(self.peak, len(self.conns) + 1)
                if free <= self.spare:
                    self.filled.set()
                self.halt.wait(0.1)
        for c in self.conns:
            c.close()

    def release(self) -> None:
        self.halt.set()
        self.join(30)


def test_connection_slots_nearly_exhausted(private_server: PrivateServer) -> None:
    dsn = private_server.database("chaos_conns")
    spare, every = 2, 0.5
    fault = (
        f"max_connections={private_server.max_connections}, all but {spare} slots taken by "
        f"another client; 1 worker connection killed every {every:g} s"
    )
    with (
        Chaos("6. connections exhausted", fault, dsn, log_patterns=("too many clients",)) as c,
        psycopg.connect(dsn, autocommit=True, application_name="chaos-fault") as killer,
    ):
        c.baseline()
        hog = Hog(dsn, spare)
        killed = 0
        try:
            with c.fault():
                hog.start()
                wait_until(hog.filled.is_set, timeout=20, message="the hog to fill the slots")
                tick = time.time()
                while time.time() < c.fault_start + TIMING.fault:
                    killed += terminate_worker_backends(killer, 1)
                    tick += every
                    c.pace_until(tick)
        finally:
            hog.release()
        c.recover()
        c.note(
            f"hog held up to {hog.peak} connections (min free slots seen: {hog.min_free}); "
            f"{killed} worker connections terminated"
        )
        c.finish()


def test_producers_outpace_workers(dsn: str) -> None:
    factor = 1.5 * PROFILE.slots / PROFILE.busy
    arrivals = factor * PROFILE.rate
    fault = f"arrivals x{factor:.1f} ({arrivals:.0f}/s, 1.5x slot capacity) for {TIMING.fault:g} s"
    with Chaos("7. overload", fault, dsn) as c:
        c.baseline()
        with c.fault():
            c.producer.factor = factor
            c.pace(TIMING.fault)
            c.producer.factor = 1.0
        c.recover()
        peak = max((s.pending for s in c.monitor.window(c.fault_start, c.fault_end + 2)), default=0)
        capacity = PROFILE.slots * PROFILE.rate / PROFILE.busy
        c.note(
            f"backlog peaked at {peak} unfinished runs, drained "
            f"{c.recovered_at - c.fault_end:.1f} s after the overload; slot capacity "
            f"{capacity:.0f} runs/s without overhead"
        )
        c.note_later(
            lambda row: (
                f"arrivals {arrivals:.0f}/s = {arrivals / row.tput_during:.2f}x "
                "the throughput measured during the overload"
            )
        )
        c.finish()


def settled_outcomes(cluster: Replicated, dbname: str) -> dict[int, tuple[str, int]]:
    """The finished runs on the primary, (state, attempt) by id, once the standby has
    flushed everything committed when they were read: outcomes the standby must keep."""
    with psycopg.connect(cluster.primary.dsn(dbname), autocommit=True) as c:
        rows = c.execute(
            "SELECT id, state, attempt FROM pgqueue.runs"
            " WHERE state IN ('succeeded', 'failed', 'canceled')"
        ).fetchall()
        lsn = c.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]

        def flushed() -> bool:
            row = c.execute(
                "SELECT flush_lsn >= %s::pg_lsn FROM pg_stat_replication WHERE state = 'streaming'",
                (lsn,),
            ).fetchone()
            return bool(row and row[0])

        wait_until(flushed, timeout=20, message="the standby to flush")
    return {i: (state, attempt) for i, state, attempt in rows}


def test_primary_killed_standby_promoted() -> None:
    """Workers and the producer on a multi-host DSN (primary, then its synchronous
    standby; target_session_attrs=read-write). The primary's processes are SIGKILLed
    under load and the standby promoted `gap` seconds later: every acknowledged enqueue
    and every outcome stored before the kill is on the new primary, the workers move
    over by themselves (none restarted), and the listeners, which meanwhile find only a
    standby, back off."""
    gap = 5.0 if FULL else 2.0
    name = "chaos_failover"
    with replicated(synchronous=True) as cluster:
        dsn = cluster.database(name)
        fault = f"SIGKILL the primary, promote the synchronous standby {gap:g} s later"
        with Chaos("8. failover", fault, dsn, log_patterns=("no primary",)) as c:
            c.baseline()
            settled = settled_outcomes(cluster, name)
            with c.fault():
                cluster.kill_primary()
                c.pace(gap)  # failure detection, as a failover manager would take
                c.promoted_at = time.time()
                cluster.promote()
            c.recover()
            with psycopg.connect(dsn, autocommit=True) as conn:
                assert conn.info.port == cluster.standby.port
                rows = conn.execute(
                    "SELECT id, state, attempt FROM pgqueue.runs WHERE id = ANY(%s)",
                    (list(settled),),
                ).fetchall()
            kept = {i: (state, attempt) for i, state, attempt in rows}
            c.note(
                f"{len(settled)} outcomes stored before the kill, {len(kept)} found after "
                f"the promotion, {sum(kept.get(i) == v for i, v in settled.items())} unchanged"
            )
            c.finish()
        assert kept == settled
