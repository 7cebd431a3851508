"""The worker's probes, served as `/healthz` (liveness) and `/healthz/ready` (readiness)
on its metrics port, for Kubernetes or any supervisor that polls HTTP.

Liveness asks whether this process still does its job: its event loop turns (the loop
watchdog's beat is younger than a third of the lease) and its heartbeat is recent (the
lease keeper renewed within the lease: were it not, the worker's claims would expire and
other workers would rescue them). A failing liveness probe means: restart this worker.

Readiness asks whether this worker can reach the database now (a connection and
`SELECT 1`, within PROBE_TIMEOUT). A failing readiness probe means: the database is the
problem; restarting would not help."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue.db import connect as db

if TYPE_CHECKING:
    from pgqueue.worker.maintenance.lease_keeper import LeaseKeeper
    from pgqueue.worker.maintenance.loop_watch import LoopWatch

# Seconds a readiness probe waits for the database (keep it under the probe's timeout).
PROBE_TIMEOUT = 3


@dataclass
class Probe:
    """One probe's answer: its HTTP status and JSON body."""

    status: int
    body: dict[str, Any]


class Probes:
    """What the probes look at, set once the worker's loop runs (until then both answer
    503 "starting")."""

    def __init__(self) -> None:
        self.watch: LoopWatch | None = None
        self.lease_keeper: LeaseKeeper | None = None
        self.dsn = ""
        self.stopping = False

    def running(self, watch: LoopWatch, lease_keeper: LeaseKeeper, dsn: str) -> None:
        """The worker's loop runs: look at its watchdog, its lease keeper, its database."""
        self.watch, self.lease_keeper, self.dsn = watch, lease_keeper, dsn

    def draining(self) -> None:
        """The worker drains: readiness answers 503 "stopping" from now on."""
        self.stopping = True

    def liveness(self) -> Probe:
        watch, keeper = self.watch, self.lease_keeper
        if watch is None or keeper is None:
            return Probe(503, {"status": "starting"})
        loop_lag = time.monotonic() - watch.beat
        heartbeat_age = keeper.lease_seconds - keeper.left()
        body: dict[str, Any] = {
            "loop_lag_seconds": round(loop_lag, 3),
            "heartbeat_age_seconds": round(heartbeat_age, 3),
        }
        problems = []
        if loop_lag > watch.limit:
            problems.append(f"the event loop has been blocked for {loop_lag:.1f}s")
        if keeper.left() <= 0:
            problems.append(f"no heartbeat for {heartbeat_age:.1f}s")
        if problems:
            return Probe(503, {"status": "unhealthy", "problems": problems, **body})
        return Probe(200, {"status": "ok", **body})

    def readiness(self) -> Probe:
        if not self.dsn:
            return Probe(503, {"status": "starting"})
        if self.stopping:
            return Probe(503, {"status": "stopping"})
        started = time.monotonic()
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=PROBE_TIMEOUT) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            reason = db.scrub(db.first_line(exc), [self.dsn])
            return Probe(503, {"status": "database unreachable", "error": reason})
        took = time.monotonic() - started
        return Probe(200, {"status": "ok", "database_seconds": round(took, 3)})

    def answer(self, path: str) -> Probe | None:
        """The probe at `path`, None for any other path."""
        if path == "/healthz":
            return self.liveness()
        if path == "/healthz/ready":
            return self.readiness()
        return None
