"""Tasks of the chaos suite (tests/chaos), run by real `pgqueue worker` processes.

Three kinds of runs share the load:

- `chaos.work`: a plain task on queue `chaos`;
- `chaos.flow`: a workflow on queue `chaos_flows` whose steps (`ctx.step`) each do work;
- `chaos.limited`: a plain task on queue `chaos_limited`, which has a cluster-wide
  `concurrency` and a per-group `group_concurrency` limit.

Every execution of a task body and of a step body is recorded in `chaos_exec` (one row
per execution, keyed by a fresh uuid; started and ended are wall-clock times taken in the
worker, which shares the host clock with the test). Writes are retried until the database
answers again and are idempotent, so killed connections and outages neither lose nor
double a record: a run executed twice shows up as two rows.

`chaos_terminal` is filled by a trigger on pgqueue.runs with every transition into, or out
of, a terminal state: a run that reached its end exactly once has exactly one row.

The same records make the scenario's history (tests.history.collect): each execution
also records its run, attempt and lease token (pgqueue.current()), and a task's result
names the lease token of the attempt that produced it, so that the history shows whose
outcome the database accepted. With PGQUEUE_HISTORY_BREAK set, the worker runs a broken
variant of one statement (tests.history.variants); with PGQUEUE_CHAOS_CRON set, a
schedule enqueues `chaos.tick` every second.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time
import uuid
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

import pgqueue
from pgqueue.errors import ConfigError
from tests.history import variants

app = pgqueue.App()
variants.install_from_env()

# `kill -USR1` prints every thread's stack (the harness asks a worker that does not stop)
faulthandler.register(signal.SIGUSR1, all_threads=True)

LIMIT = 3  # chaos_limited: runs at once, cluster-wide
GROUP_LIMIT = 2  # chaos_limited: runs at once per group
GROUPS = ("t0", "t1", "t2", "t3")
MAX_ATTEMPTS = 25  # generous: the faults make attempts fail; runs must still succeed
FAST = pgqueue.RetryPolicy(base=0.05, factor=2.0, max_delay=1.0, jitter=0.25)

app.queue("chaos_limited", concurrency=LIMIT, group_concurrency=GROUP_LIMIT)

DDL = """
CREATE TABLE IF NOT EXISTS chaos_exec (
    exec_id uuid PRIMARY KEY,
    kind    text NOT NULL,              -- plain | limited | step
    tag     text NOT NULL,              -- the run's first argument (unique per run)
    run_id  bigint,                     -- the run (of a step: the workflow run)
    step    text,                       -- steps: the step name
    attempt integer,                    -- ctx.attempt of the executing attempt
    grp     text,                       -- limited: the run's group
    token   text,                       -- the executing attempt's lease token
    queue   text,                       -- the run's queue
    pid     integer NOT NULL,
    started double precision NOT NULL,
    ended   double precision
);
CREATE TABLE IF NOT EXISTS chaos_terminal (
    run_id    bigint NOT NULL,
    old_state text NOT NULL,
    new_state text NOT NULL,
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION chaos_audit() RETURNS trigger LANGUAGE plpgsql
SET search_path = public, pg_catalog AS $$
BEGIN
    INSERT INTO chaos_terminal (run_id, old_state, new_state)
    VALUES (NEW.id, OLD.state, NEW.state);
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS chaos_audit ON pgqueue.runs;
CREATE TRIGGER chaos_audit AFTER UPDATE OF state ON pgqueue.runs FOR EACH ROW
WHEN (OLD.state IS DISTINCT FROM NEW.state
      AND (NEW.state IN ('succeeded', 'failed', 'canceled')
           OR OLD.state IN ('succeeded', 'failed', 'canceled')))
EXECUTE FUNCTION chaos_audit();
"""

# What "the database is unreachable right now" looks like from a task's side.
UNREACHABLE = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout, ConfigError)


def _write(query: str, params: Any, deadline: float = 120.0) -> None:
    """An idempotent write through the App's pool, retried until the database is back."""
    give_up = time.monotonic() + deadline
    while True:
        try:
            with app.connection() as conn:
                conn.execute(query, params)
            return
        except UNREACHABLE:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.05)


class Execution:
    """One execution of a body, recorded in chaos_exec at its start and at its end."""

    def __init__(self, kind: str, tag: str, **fields: Any) -> None:
        self.id = uuid.uuid4()
        ctx = pgqueue.current()
        self.token = lease_token(ctx)
        _write(
            "INSERT INTO chaos_exec (exec_id, kind, tag, run_id, step, attempt, grp, token,"
            " queue, pid, started)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (exec_id) DO NOTHING",
            (
                self.id,
                kind,
                tag,
                ctx.run_id,
                fields.get("step"),
                ctx.attempt,
                fields.get("grp"),
                self.token,
                ctx.queue,
                os.getpid(),
                time.time(),
            ),
        )

    def end(self) -> None:
        ended = time.time()  # when the body ended, not when the write got through
        _write("UPDATE chaos_exec SET ended = %s WHERE exec_id = %s", (ended, self.id))


def lease_token(ctx: pgqueue.Context) -> str | None:
    """The lease token of the attempt `ctx` runs (private to pgqueue: the history needs
    it to tell attempts apart, a task does not)."""
    return ctx._lease_token


def result(tag: str) -> dict[str, Any]:
    """A task's result: its tag, and the lease token of the attempt that made it."""
    return {"tag": tag, "token": lease_token(pgqueue.current())}


@app.task(name="chaos.work", queue="chaos", max_attempts=MAX_ATTEMPTS, retry=FAST)
def work(tag: str, seconds: float) -> dict[str, Any]:
    execution = Execution("plain", tag)
    time.sleep(seconds)
    execution.end()
    return result(tag)


def _group(tag: str, group: str, seconds: float) -> str:
    return group


@app.task(
    name="chaos.limited",
    queue="chaos_limited",
    max_attempts=MAX_ATTEMPTS,
    retry=FAST,
    group=_group,
)
def limited(tag: str, group: str, seconds: float) -> dict[str, Any]:
    execution = Execution("limited", tag, grp=group)
    time.sleep(seconds)
    execution.end()
    return result(tag)


def _step_body(tag: str, run_id: int, step: str, seconds: float) -> int:
    # the attempt from the run's Context: an argument must be the same on every replay
    # (the determinism check compares a memoized step's arguments with its record's)
    attempt = pgqueue.current().attempt
    execution = Execution("step", tag, run_id=run_id, step=step, attempt=attempt)
    time.sleep(seconds)
    execution.end()
    return 1


@app.workflow(name="chaos.flow", queue="chaos_flows", max_attempts=MAX_ATTEMPTS, retry=FAST)
def flow(ctx: pgqueue.Context, tag: str, steps: int, seconds: float) -> dict[str, Any]:
    done = 0
    for i in range(steps):
        name = f"s{i}"
        done += ctx.step(name, _step_body, tag, ctx.run_id, name, seconds)
    return result(tag) | {"done": done}


TICK = "chaos.tick"
if os.environ.get("PGQUEUE_CHAOS_CRON"):

    @app.periodic(cron="* * * * * *", name=TICK)
    @app.task(name=TICK, queue="chaos")
    def tick() -> dict[str, Any]:
        return result("tick")
