"""How long claims and enqueues wait while `pgqueue migrate` runs over a large runs table.

A scratch database is migrated to revision --from (default: 0020, the schema of the old
code in the rolling upgrade test, releases.toml), filled with --runs runs (half queued in
queue `q`, half finished), vacuumed; then one connection claims a run at a time (the
shape of sql/claim.sql, reduced to the columns every revision has), another enqueues a run
at a time, and `pgqueue migrate` (this tree's, a subprocess) runs to head. Printed: the
migration's duration, and the longest and 99th percentile wait of a claim and of an
enqueue while it ran (bench/RESULTS.md, Migrations under load).

    python -m bench.migrate_lock --runs 500000
    python -m bench.migrate_lock --runs 500000 --from 0001   # every revision
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time

from bench.common import ROOT, Scratch, percentile, subprocess_env
from pgqueue.db import migrate

FILL = """
INSERT INTO pgqueue.runs (task, queue, state, finished_at)
SELECT 'bench.noop', 'q', s, CASE WHEN s = 'succeeded' THEN now() END
  FROM generate_series(1, %(runs)s) g,
       LATERAL (SELECT CASE WHEN g %% 2 = 0 THEN 'queued' ELSE 'succeeded' END AS s) x
"""
CLAIM = """
UPDATE pgqueue.runs
   SET state = 'running', attempt = attempt + 1, lease_token = gen_random_uuid(),
       lease_expires_at = now() + interval '30 seconds', started_at = now()
 WHERE id = (SELECT id FROM pgqueue.runs WHERE state = 'queued' AND queue = 'q'
              ORDER BY priority, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id
"""
ENQUEUE = """
INSERT INTO pgqueue.runs (task, queue, group_key) VALUES ('bench.noop', 'q', '') RETURNING id
"""


class Timer(threading.Thread):
    """Runs `statement` in a loop on a connection of its own, recording each one's time
    (start, seconds) until stopped."""

    def __init__(self, scratch: Scratch, statement: str) -> None:
        super().__init__(daemon=True)
        self.scratch, self.statement = scratch, statement
        self.times: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with self.scratch.connect() as conn:
            while not self.stop.is_set():
                started = time.monotonic()
                conn.execute(self.statement).fetchall()  # type: ignore[arg-type]
                self.times.append((started, time.monotonic() - started))

    def during(self, begin: float, end: float) -> list[float]:
        """The statements in progress at some moment of [begin, end]."""
        return [took for at, took in self.times if at <= end and at + took >= begin]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500_000)
    parser.add_argument("--from", dest="start", default="0020", help="revision to start at")
    parser.add_argument("--server", default=Scratch.server)
    args = parser.parse_args()

    from alembic import command

    scratch = Scratch(server=args.server, name="pgqueue_bench_migrate")
    scratch.drop()
    with scratch._admin() as admin:
        admin.execute("CREATE DATABASE pgqueue_bench_migrate")
    try:
        with migrate._config(scratch.dsn) as cfg:
            command.upgrade(cfg, args.start)
        with scratch.connect() as conn:
            conn.execute(FILL, {"runs": args.runs})  # type: ignore[arg-type]
            conn.execute("VACUUM (ANALYZE) pgqueue.runs")
        timers = [Timer(scratch, CLAIM), Timer(scratch, ENQUEUE)]
        for t in timers:
            t.start()
        time.sleep(1.0)  # a second of claims and enqueues before, for the baseline
        begin = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pgqueue", "migrate", "--dsn", scratch.dsn],
            cwd=ROOT,
            env=subprocess_env(),
            capture_output=True,
            text=True,
        )
        end = time.monotonic()
        time.sleep(0.5)
        for t in timers:
            t.stop.set()
            t.join()
        if done.returncode != 0:
            sys.exit(f"pgqueue migrate failed: {done.stdout}{done.stderr}")
        print(
            f"pgqueue migrate {args.start} -> {migrate.head()} over {args.runs:,} runs: "
            f"{end - begin:.2f} s"
        )
        for name, t in zip(("claim", "enqueue"), timers, strict=True):
            before = [took for at, took in t.times if at + took < begin]
            waits = t.during(begin, end)
            print(
                f"  {name:8} during: {len(waits):6} statements, longest {max(waits):.3f} s, "
                f"p99 {percentile(waits, 99) * 1000:.1f} ms "
                f"(before: p99 {percentile(before, 99) * 1000:.1f} ms)"
            )
        for line in (done.stdout + done.stderr).splitlines():
            if "trying again" in line:
                print("  " + line)
    finally:
        scratch.drop()


if __name__ == "__main__":
    main()
