"""A full disk under the database (issue 47, point 6): the data directory of a private
server on a small tmpfs, filled to the last page by a file. Then:

- an enqueue fails with pgqueue.DatabaseFull (a DatabaseUnavailable: "out of disk
  space"), the CLI's with one line and exit code 2, and nothing of it is written (a batch
  enqueue either);
- the worker stays up: the outcomes of its runs that finished meanwhile (results large
  enough to need new pages) cannot be written, and its completer keeps them and retries;
- once the file is removed, every outcome kept is written, every acknowledged run
  succeeds once, and a run enqueued afterwards is served.

The WAL lives on another filesystem (initdb --waldir): with the WAL's own disk full
PostgreSQL stops (a PANIC), which the worker survives as any outage (test_outage_log.py).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

import pgqueue
from tests.faults.machine import fill, tmpfs
from tests.helpers import InProcessWorker, run_states, scalar, wait_until
from tests.private import private_server
from tests.replication import server_user

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

BIG = 60_000  # bytes of incompressible text: TOASTed, so it needs pages of its own


def big() -> str:
    return secrets.token_hex(BIG // 2)


def test_a_full_disk_fails_enqueues_cleanly_and_loses_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="pgqueue")
    wal_base = Path(tempfile.mkdtemp(prefix="pgq-wal-"))
    try:
        with tmpfs("160m") as disk:
            server_user(wal_base)
            with private_server(disk, initdb=(f"--waldir={wal_base / 'wal'}",)) as server:
                run_scenario(server.database("disk_full"), disk / "filler", caplog)
    finally:
        shutil.rmtree(wal_base, ignore_errors=True)


def run_scenario(dsn: str, filler: Path, caplog: pytest.LogCaptureFixture) -> None:
    app = pgqueue.App(dsn)
    gate = threading.Event()
    executions: dict[int, int] = {}

    @app.task(name="disk.work")
    def work(n: int, payload: str = "") -> str:
        gate.wait(120)
        executions[n] = executions.get(n, 0) + 1
        return big()  # a result that needs new pages to be written

    def count() -> int:
        return int(scalar(dsn, "SELECT count(*) FROM pgqueue.runs"))

    try:
        with InProcessWorker(app, concurrency=4, lease_seconds=60) as worker:
            held = [work.enqueue(n).id for n in range(4)]
            wait_until(lambda: run_states(dsn, held) == ["running"] * 4, message="4 runs to start")

            filled = fill(filler)
            print(f"filled the data directory's filesystem with {filled} bytes")
            gate.set()  # the bodies end; their outcomes need the disk
            wait_until(
                lambda: any(
                    r.getMessage().startswith("completer: database out of disk space")
                    for r in caplog.records
                ),
                30,
                message="the completer to find the disk full and retry",
            )

            # Enqueues fail with a pgqueue error, and write nothing.
            before = count()
            with pytest.raises(pgqueue.DatabaseFull, match="out of disk space") as caught:
                work.enqueue(100, big())
            assert isinstance(caught.value, pgqueue.DatabaseUnavailable)
            assert "\n" not in str(caught.value)
            with pytest.raises(pgqueue.DatabaseFull):
                work.enqueue_many([(200 + i, big()) for i in range(20)])
            command = [sys.executable, "-m", "pgqueue", "enqueue", "--dsn", dsn, "disk.work"]
            cli = subprocess.run(
                [*command, "--args", f'[300, "{big()}"]'],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "PYTHONPATH": os.getcwd()},
            )
            assert cli.returncode == 2, cli
            assert "out of disk space" in cli.stderr and "Traceback" not in cli.stderr, cli
            assert len(cli.stderr.strip().splitlines()) == 1, cli.stderr
            assert count() == before, "a failed enqueue left rows behind"

            # The worker is up, holding its outcomes: none written, not even in part.
            kept = worker.completer.unwritten
            print(f"outcomes kept by the completer while the disk was full: {kept}")
            assert kept > 0
            assert run_states(dsn, held) == ["running"] * 4
            assert scalar(dsn, "SELECT count(result) FROM pgqueue.runs") == 0

            filler.unlink()  # space returns
            wait_until(
                lambda: run_states(dsn, held) == ["succeeded"] * 4,
                60,
                message="the kept outcomes to be written",
            )
            results = [
                scalar(dsn, "SELECT length(result #>> '{}') FROM pgqueue.runs WHERE id = %s", (i,))
                for i in held
            ]
            assert results == [BIG] * 4, results
            after = work.enqueue(5, big()).id
            wait_until(
                lambda: run_states(dsn, [after]) == ["succeeded"], 30, message="a new run served"
            )
            assert executions == {0: 1, 1: 1, 2: 1, 3: 1, 5: 1}, executions
            assert count() == before + 1
    finally:
        app.close()
    down = [r for r in caplog.records if r.getMessage().startswith("database down")]
    back = [r for r in caplog.records if r.getMessage().startswith("database back")]
    print("worker:", *(r.getMessage() for r in down + back), sep="\n  ")
    assert down and "out of disk space" in down[0].getMessage()
    assert len(down) == len(back)
