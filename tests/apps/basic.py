"""Tasks used by the tests' worker processes. Side effects go to table `effects`."""

from __future__ import annotations

import asyncio
import gc
import os
import time

import psycopg

import pgqueue

app = pgqueue.App()

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS effects (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id bigint, tag text, pid integer, at timestamptz DEFAULT clock_timestamp()
)"""


def record(tag: str, run_id: int | None = None) -> None:
    dsn = app.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO effects (run_id, tag, pid) VALUES (%s, %s, %s)", (run_id, tag, os.getpid())
        )


@app.task(name="noop")
def noop(n: int = 0) -> int:
    return n


@app.task(name="gc_state")
async def gc_state() -> list[int]:
    """The worker process's collector settings: [young threshold, frozen objects]."""
    return [gc.get_threshold()[0], gc.get_freeze_count()]


@app.task(name="effect")
def effect(tag: str) -> str:
    record(tag)
    return tag


@app.task(name="sleepy", max_attempts=3)
def sleepy(tag: str, seconds: float) -> str:
    record(f"start:{tag}")
    time.sleep(seconds)
    record(f"end:{tag}")
    return tag


@app.task(name="async_sleepy")
async def async_sleepy(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"
