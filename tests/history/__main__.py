"""`python -m tests.history`: one short chaos scenario (leases cut short under a live
worker, tests.history.scenarios), checked by the history checker. Exit status 0 when it
finds no violation; 1, with every violation and the events that prove it, otherwise.

The server: PGQUEUE_TEST_DSN (as for the test suite), else a local PostgreSQL
(postgresql://postgres@127.0.0.1:5432/postgres). The scenario runs in a database of its
own, `pgqueue_history_check`, dropped and created again on that server.

    python -m tests.history                      # the real statements
    python -m tests.history --break no-fence     # a broken variant: expect violations
"""

from __future__ import annotations

import argparse
import os
import sys

import psycopg
from psycopg.conninfo import make_conninfo

from pgqueue.db import migrate
from tests.history import scenarios, variants

DATABASE = "pgqueue_history_check"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def fresh_database(server: str) -> str:
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{DATABASE}"')
    dsn = make_conninfo(server, dbname=DATABASE)
    migrate.upgrade(dsn)
    return dsn


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.history", description=__doc__)
    p.add_argument("--break", dest="variant", choices=sorted(variants.VARIANTS))
    args = p.parse_args(argv)
    dsn = fresh_database(os.environ.get("PGQUEUE_TEST_DSN") or DEFAULT_DSN)
    try:
        c = scenarios.leases_cut_short(dsn, args.variant)
    except AssertionError as exc:
        # the scenario's own checks (tests.chaos.harness) failed: the history's violations
        # are among them
        print(f"violation: {exc}")
        return 1
    print(c.history_report)
    return 1 if c.violations else 0


if __name__ == "__main__":
    sys.exit(main())
