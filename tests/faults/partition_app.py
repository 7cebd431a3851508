"""The task of the partition test (tests/faults/test_partition.py), run by `pgqueue worker`
processes, one of them cut off from the database.

`chaos.work` records each execution as the chaos suite's task does (tests.chaos.app: a
`chaos_exec` row with its run, attempt, lease token and worker pid, which the history
checker reads), except its end: that goes to a local file ($PGQUEUE_PARTITION_ENDS, one
line per execution), which the test copies into `chaos_exec` afterwards. So a body cut
off from the database ends, and hands its outcome to the worker, during the partition
(a database write at its end would hold it until the link is back). Its result names the
lease token of the attempt that produced it, as the chaos suite's do.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

import pgqueue
from tests.chaos import app as chaos  # which installs the broken variant named in the env

app = pgqueue.App()
ENDS = "PGQUEUE_PARTITION_ENDS"


@app.task(name="chaos.work", queue="chaos", max_attempts=5)
def work(tag: str, seconds: float) -> dict[str, Any]:
    ctx = pgqueue.current()
    token = chaos.lease_token(ctx)
    exec_id = uuid.uuid4()
    with app.connection() as conn:
        conn.execute(
            "INSERT INTO chaos_exec (exec_id, kind, tag, run_id, attempt, token, queue, pid,"
            " started) VALUES (%s, 'plain', %s, %s, %s, %s, %s, %s, %s)",
            (exec_id, tag, ctx.run_id, ctx.attempt, token, ctx.queue, os.getpid(), time.time()),
        )
    time.sleep(seconds)
    with open(os.environ[ENDS], "a") as ends:
        ends.write(json.dumps({"exec_id": str(exec_id), "ended": time.time()}) + "\n")
    return {"tag": tag, "token": token}


def copy_ends(dsn: str, path: str) -> int:
    """The ends recorded in `path`, into chaos_exec; how many."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
    with psycopg.connect(dsn, autocommit=True) as c:
        for row in rows:
            c.execute(
                "UPDATE chaos_exec SET ended = %s WHERE exec_id = %s",
                (row["ended"], row["exec_id"]),
            )
    return len(rows)
