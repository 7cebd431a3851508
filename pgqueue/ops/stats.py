"""`pgqueue stats`: one screen of what the cluster is doing, from the inspection views
(pgqueue.queue_stats and pgqueue.workers_live)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgqueue.db import sql as _sql
from pgqueue.runs.terminal import printable, seconds_text

QUEUE_COLUMNS = (
    ("QUEUE", "queue"),
    ("QUEUED", "queued"),
    ("SCHEDULED", "scheduled"),
    ("RUNNING", "running"),
    ("WAITING", "waiting"),
    ("OLDEST", "oldest_queued_seconds"),
    ("DONE/MIN", "finished_last_minute"),
    ("DONE/H", "finished_last_hour"),
    ("FAILED/H", "failed_last_hour"),
    ("PICKUP P50", "pickup_p50_seconds"),
    ("PICKUP P95", "pickup_p95_seconds"),
    ("RUN P50", "duration_p50_seconds"),
    ("RUN P95", "duration_p95_seconds"),
)
SECONDS = {key for _, key in QUEUE_COLUMNS if key.endswith("_seconds")}


def snapshot(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Queues, live workers and the database's clock, read in one transaction."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_sql.query("no_jit"))
        queues = cur.execute(_sql.query("queue_stats")).fetchall()
        workers = cur.execute(_sql.query("workers_live")).fetchall()
        now = cur.execute("SELECT now() AS now").fetchone()
    assert now is not None
    return {"at": now["now"], "queues": queues, "workers": workers}


def render(snap: dict[str, Any]) -> str:
    queues, workers = snap["queues"], snap["workers"]
    at: datetime = snap["at"]
    slots = sum(w["concurrency"] for w in workers)
    busy = sum(w["running"] for w in workers)
    rate = sum(q["finished_last_minute"] for q in queues) / 60
    lines = [
        f"pgqueue  {at:%Y-%m-%d %H:%M:%S %Z}  {len(workers)} workers live, "
        f"{busy}/{slots} slots busy, {rate:.1f} runs/s finished (last minute)",
        "",
    ]
    rows = [
        [_queue_cell(q, key) for _, key in QUEUE_COLUMNS]
        for q in queues
        if any(q[k] for k in ("queued", "scheduled", "running", "waiting", "finished_last_hour"))
        or q["paused"]
    ]
    lines += _table([h for h, _ in QUEUE_COLUMNS], rows) if rows else ["(no queue has work)"]
    lines.append("")
    worker_rows = [
        [
            str(w["id"])[:8],
            w["host"],
            str(w["pid"]),
            ",".join(w["queues"]),
            f"{w['running']}/{w['concurrency']}",
            seconds_text(w["heartbeat_age_seconds"], compact=True),
        ]
        for w in workers
    ]
    headers = ["WORKER", "HOST", "PID", "QUEUES", "BUSY", "HEARTBEAT"]
    lines += _table(headers, worker_rows) if worker_rows else ["(no live worker)"]
    return "\n".join(lines)


def _queue_cell(q: dict[str, Any], key: str) -> str:
    value = q[key]
    if key == "queue" and q["paused"]:
        return f"{value} (paused)"
    if key in SECONDS:
        return seconds_text(value, compact=True)
    return str(value)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return out
