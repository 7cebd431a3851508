"""Baseline for the pickup benchmark: the least a LISTEN-driven claimer can do.

`python -m bench.raw_listener DSN`: LISTEN on `bench_raw`; for each notification (payload: a
run id) mark that run started with one UPDATE on a second connection. The pickup benchmark
measures started_at - created_at for these runs exactly as for pgqueue's worker, so the
ratio shows what pgqueue adds on top of PostgreSQL's own NOTIFY round trip.
"""

from __future__ import annotations

import contextlib
import sys

import psycopg

CHANNEL = "bench_raw"

MARK_STARTED = """
UPDATE pgqueue.runs
   SET state = 'running', lease_token = gen_random_uuid(), started_at = now()
 WHERE id = %s
"""


def main(dsn: str) -> None:
    with (
        psycopg.connect(dsn, autocommit=True) as listen,
        psycopg.connect(dsn, autocommit=True) as work,
    ):
        listen.execute(f"LISTEN {CHANNEL}")
        for note in listen.notifies():
            work.execute(MARK_STARTED, (int(note.payload),))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main(sys.argv[1])
