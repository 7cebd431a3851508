from __future__ import annotations

import re
import shlex
import subprocess
import sys

import psycopg

import pgqueue
from pgqueue.db import connect as db


def test_enqueue_and_burst_worker(app: pgqueue.App) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    handle = add.enqueue(2, 3)
    app.worker(install_signal_handlers=False).run(burst=True)
    assert handle.wait(timeout=5) == 5
    run = app.get_run(handle.id)
    assert (run.state, run.attempt) == ("succeeded", 1)


def test_the_demo_runs_every_run_to_success(dsn: str) -> None:
    """`pgqueue demo` (the README's first command; here on the test server, not the
    embedded one): its batch and workflows run through a real worker to the end."""
    out = subprocess.run(
        [sys.executable, "-m", "pgqueue", "demo", "--dsn", dsn, "--runs", "20"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    summary = out.stdout + out.stderr
    match = re.search(r"states: (.*)", summary)
    assert match and match[1].startswith("succeeded ") and "," not in match[1], summary
    announced = re.search(r"enqueueing (\d+) runs", summary)
    enqueued = re.search(r"enqueued (\d+) runs", summary)
    assert announced and enqueued and announced[1] == enqueued[1], summary

    # The SQL it suggests enqueues into the demo's queue, and the worker command it
    # suggests runs that run.
    sql = re.search(r"(SELECT pgqueue\.enqueue\(.*\));", summary)
    command = re.search(r"^\s*(pgqueue worker .*)$", summary, re.M)
    assert sql and command, summary
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql[1]).fetchone()
        assert row is not None
        run_id = row[0]
    args = shlex.split(command[1].replace(db.redact(dsn), dsn))[1:]
    done = subprocess.run(
        [sys.executable, "-m", "pgqueue", *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        state = conn.execute("SELECT state FROM pgqueue.runs WHERE id = %s", [run_id]).fetchone()
    assert state == ("succeeded",)


def test_the_demo_takes_embedded_as_every_command_does(dsn: str) -> None:
    """`--embedded` is the demo's default, and it says so when given with --dsn."""
    out = subprocess.run(
        [sys.executable, "-m", "pgqueue", "demo", "--embedded", "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2 and "either --dsn or --embedded" in out.stderr, out.stderr
