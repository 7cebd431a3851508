"""A renewal extends only a lease that is still valid when the renewal reaches its row,
not merely when its statement began: a renewal that waited for the row past the lease's
expiry must not bring the lease back. By then a limited queue's claim (which counts valid
leases) may have given the permit to another run, and the revived lease would put the
queue over its limit (the history checker found it: tests/history, scenario 9)."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from pgqueue.db import sql as _sql
from tests.helpers import wait_until

WORKER = "00000000-0000-0000-0000-000000000001"


def test_a_renewal_that_waited_past_the_expiry_does_not_revive_the_lease(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version)"
            " VALUES (%s, 'h', 1, '{default}', 1, 'test')",
            (WORKER,),
        )
        run_id, token, expires = c.execute(
            """INSERT INTO pgqueue.runs (task, queue, state, attempt, worker_id, lease_token,
                                         lease_expires_at, started_at)
               VALUES ('t', 'default', 'running', 1, %s, gen_random_uuid(),
                       now() + interval '1 second', now())
               RETURNING id, lease_token::text, extract(epoch FROM lease_expires_at)""",
            (WORKER,),
        ).fetchone() or (None, None, None)
    blocker = psycopg.connect(dsn)
    renewer = psycopg.connect(dsn, autocommit=True)
    try:
        # another session holds the run's row (a completion, a cancel...)
        blocker.execute("SELECT 1 FROM pgqueue.runs WHERE id = %s FOR UPDATE", (run_id,))
        answer: list[Any] = []
        params = {
            "worker_id": WORKER,
            "lease_seconds": 30,
            "id": [run_id],
            "lease_token": [token],
            "running": None,
        }
        renewal = threading.Thread(
            target=lambda: answer.append(
                renewer.execute(_sql.query("renew_leases"), params).fetchall()
            )
        )
        renewal.start()  # begins while the lease is valid, then waits for the row
        with psycopg.connect(dsn, autocommit=True) as watcher:
            wait_until(
                lambda: bool(
                    watcher.execute(
                        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                        (renewer.info.backend_pid,),
                    ).fetchone()[0]  # type: ignore[index]
                ),
                timeout=10,
                message="the renewal to wait for the row",
            )
            began = watcher.execute(
                "SELECT extract(epoch FROM query_start) FROM pg_stat_activity WHERE pid = %s",
                (renewer.info.backend_pid,),
            ).fetchone()[0]  # type: ignore[index]
        assert began < expires, "the renewal must begin while the lease is valid"
        # the lease expires while the renewal waits (a deadline, not a synchronisation)
        wait_until(lambda: time.time() > float(expires) + 0.05, timeout=10, message="expiry")
        blocker.commit()
        renewal.join(10)
        assert answer == [[]], f"an expired lease was renewed: {answer}"
        with psycopg.connect(dsn, autocommit=True) as c:
            valid = c.execute(
                "SELECT lease_expires_at > now() FROM pgqueue.runs WHERE id = %s", (run_id,)
            ).fetchone()[0]  # type: ignore[index]
        assert valid is False
    finally:
        blocker.close()
        renewer.close()
