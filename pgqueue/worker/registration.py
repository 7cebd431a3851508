"""The worker's row in pgqueue.workers, and the checks made before it is written: the
schema is migrated, the role has every grant a worker uses."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from psycopg.types.json import Jsonb

from pgqueue.db import connect as db
from pgqueue.db import grants, migrate
from pgqueue.db import sql as _sql
from pgqueue.errors import PermissionDenied
from pgqueue.tasks.rates import parse_rate, rate_params
from pgqueue.worker._service import DB_ERRORS, Pool

if TYPE_CHECKING:
    from pgqueue.tasks.registry import QueueConfig

log = logging.getLogger("pgqueue.worker")


def register(
    dsn: str,
    pooler: str | None,
    worker_id: UUID,
    queues: list[str],
    concurrency: int,
    *,
    declared: Iterable[QueueConfig],
    tasks: list[str],
    version: str,
    sync_schedules: Callable[[Any], object],
) -> None:
    """Check the schema and the grants, configure the app's `declared` queues, add the
    worker's row (serving `tasks`, pgqueue `version`) and sync the app's schedules
    (sync_schedules(conn)), in one connection. A role without the worker's grants stops
    here, in one line (PermissionDenied), rather than in a duty's retry loop."""
    with db.connect(dsn, pooler=pooler) as conn, db.translate_errors(conn):
        migrate.check(conn)
        check_privileges(conn)
        for q in declared:
            conn.execute(_sql.query("configure_queue"), configure_params(q))
        conn.execute(
            _sql.query("register_worker"),
            {
                "id": worker_id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "queues": queues,
                "tasks": tasks,
                "concurrency": concurrency,
                "version": version,
            },
        )
        sync_schedules(conn)


def configure_params(q: QueueConfig) -> dict[str, Any]:
    """configure_queue.sql's parameters for a queue declared in code."""
    return {
        "queue": q.name,
        "concurrency": q.concurrency,
        "group_concurrency": q.group_concurrency,
        "ordered": q.ordered,
        **rate_params("rate", parse_rate("rate_limit", q.rate_limit)),
        **rate_params("group_rate", parse_rate("group_rate_limit", q.group_rate_limit)),
        "group_weights": None if q.group_weights is None else Jsonb(dict(q.group_weights)),
        "default_group_weight": q.default_group_weight,
        "priority_aging": q.priority_aging,
    }


def check_privileges(conn: Any) -> None:
    """Refuse to start without every privilege a worker uses: a missing one would
    otherwise surface later, in one duty's retry loop (one catalog query, at start)."""
    lacking = grants.missing(conn, "worker")
    if lacking:
        role = conn.info.user
        more = f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""
        raise PermissionDenied(
            f"role {role} lacks the worker's grants ({'; '.join(lacking[:3])}{more}): "
            f"the owner of schema pgqueue can run `pgqueue grants {role} --as worker "
            "--apply` (see docs/security.md)"
        )


async def deregister(pool: Pool, worker_id: UUID) -> None:
    try:
        async with pool.connection(timeout=2) as conn:
            await conn.execute(_sql.query("deregister_worker"), {"id": worker_id})
    except DB_ERRORS:
        log.warning("could not remove worker %s from pgqueue.workers; it will be pruned", worker_id)
