"""Health of an installation as `pgqueue health` reports it: the database answers, the
schema is the one this pgqueue needs, and workers beat. Each check is one line."""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from pgqueue.db import connect as db
from pgqueue.db import migrate
from pgqueue.db import sql as _sql
from pgqueue.errors import PgQueueError

# A worker renews its heartbeat every third of its lease (10 s by default); one that has
# not for a minute is as good as gone (the pgqueue.workers_live view uses the same bound).
MAX_HEARTBEAT_AGE = 60.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def checks(dsn: str, *, host: str | None = None, max_age: float = MAX_HEARTBEAT_AGE) -> list[Check]:
    """database, schema, workers: each a Check. `host` None: the workers of any host;
    by default this machine's (socket.gethostname(), as workers register)."""
    try:
        conn = db.connect(dsn)
    except (PgQueueError, psycopg.Error) as exc:
        reason = db.scrub(db.first_line(exc), [dsn])
        return [
            Check("database", False, f"unreachable: {reason}"),
            Check("schema", False, "not checked (no database)"),
            Check("workers", False, "not checked (no database)"),
        ]
    with conn:
        found = conn.execute("SELECT pg_catalog.version()").fetchone()
        version = str(found[0]).split(" on ")[0] if found else "?"
        result = [Check("database", True, f"reachable ({version})")]
        revision = migrate.current(conn)
        waiting = migrate.pending(revision)
        result.append(
            Check(
                "schema", revision is not None and not waiting, migrate.describe(revision, waiting)
            )
        )
        if revision is None:
            result.append(Check("workers", False, "not checked (no schema)"))
            return result
        row = conn.execute(
            _sql.query("health_workers"), {"host": host, "max_age": max_age}
        ).fetchone()
        beating = row[0] if row else 0
        assert isinstance(beating, int)
        where = f"on {host}" if host is not None else "on any host"
        result.append(
            Check(
                "workers",
                beating > 0,
                f"{beating} worker{'s' if beating != 1 else ''} {where} beat within {max_age:g}s",
            )
        )
    return result


def this_host() -> str:
    return socket.gethostname()
