"""The app of the rolling upgrade test (tests/sql/test_rolling_upgrade.py), imported by the
previous release's code and by this one's: it uses only API both have. `python -m
tests.apps.rolling STOP_FILE` is its producer: it enqueues run after run until STOP_FILE
exists, printing `ok N` for each enqueue acknowledged and `failed N: ERROR` for each one
that raised."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psycopg

import pgqueue

app = pgqueue.App()

QUEUE = "rolling"

DONE_DDL = """
CREATE TABLE IF NOT EXISTS rolling_done (
    n bigint NOT NULL, pid integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp()
)"""


@app.task(name="rolling.work", queue=QUEUE)
def work(n: int) -> int:
    """Records that run n's body ran, and in which process."""
    with psycopg.connect(app.dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO rolling_done (n, pid) VALUES (%s, %s)", (n, os.getpid()))
    return n


def produce(stop: Path) -> None:
    n = 0
    while not stop.exists():
        n += 1
        try:
            work.enqueue(n)
        except Exception as exc:
            print(f"failed {n}: {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
        else:
            print(f"ok {n}", flush=True)
        time.sleep(0.005)  # pacing, about 150 enqueues a second: not a synchronisation


if __name__ == "__main__":
    produce(Path(sys.argv[1]))
