"""Recording a scenario's history in its test database, and reading it back.

What records what:

- the producer (tests.chaos.harness.Producer): enqueues acknowledged, and runs enqueued
  in transactions it rolled back on purpose (passed to `read`);
- the task app (tests.chaos.app): every execution of a task or step body, with its run,
  attempt, lease token, queue, group, worker pid, start and end (`chaos_exec`); a task's
  result names the lease token of the attempt that produced it;
- the database, with the triggers below (test database only): every change of a run's
  state, lease token, lease expiry or result (`history_runs`), and every step write
  (`history_steps`), each with whether the lease it was written under was still valid at
  that moment (`lease_expires_at > now()`, the fence's own clock);
- the end state: every run, its final state, and the cron runs (pgqueue.runs).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import psycopg

from tests.history.events import (
    Claimed,
    CronTick,
    Effect,
    Enqueued,
    Final,
    History,
    LeaseLost,
    OutcomeRejected,
    OutcomeWritten,
    Renewed,
    RolledBack,
    Started,
    StepStored,
    Terminal,
)

TERMINAL = ("succeeded", "failed", "canceled")
SCHEDULE_KEY = "pgqueue.schedule:"  # pgqueue.schedules.tick_key

# The trigger functions name their tables with the schema: they also fire inside
# pgqueue's functions, whose search_path is pinned to pg_catalog, pgqueue, pg_temp.
DDL = """
CREATE TABLE IF NOT EXISTS history_runs (
    run_id      bigint NOT NULL,
    at          double precision NOT NULL,
    old_state   text,
    new_state   text,
    old_token   text,
    new_token   text,
    new_attempt integer,
    old_valid   boolean,   -- the old lease had not expired at the statement's now()
    old_expires double precision,  -- when the old lease expired (or would have)
    writer      text,      -- the lease token a task's result names
    error       text
);
CREATE OR REPLACE FUNCTION history_runs_log() RETURNS trigger LANGUAGE plpgsql
SET search_path = public, pg_catalog AS $$
BEGIN
    INSERT INTO public.history_runs VALUES (
        NEW.id, extract(epoch FROM clock_timestamp()), OLD.state, NEW.state,
        OLD.lease_token::text, NEW.lease_token::text, NEW.attempt,
        coalesce(OLD.lease_expires_at > now(), false),
        extract(epoch FROM OLD.lease_expires_at),
        CASE WHEN jsonb_typeof(NEW.result) = 'object' THEN NEW.result ->> 'token' END,
        NEW.error);
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS history_runs_log ON pgqueue.runs;
CREATE TRIGGER history_runs_log AFTER UPDATE ON pgqueue.runs FOR EACH ROW
WHEN (OLD.state IS DISTINCT FROM NEW.state
      OR OLD.lease_token IS DISTINCT FROM NEW.lease_token
      OR OLD.lease_expires_at IS DISTINCT FROM NEW.lease_expires_at
      OR OLD.result IS DISTINCT FROM NEW.result)
EXECUTE FUNCTION history_runs_log();
CREATE TABLE IF NOT EXISTS history_steps (
    run_id      bigint NOT NULL,
    name        text NOT NULL,
    state       text NOT NULL,
    attempt     integer,
    at          double precision NOT NULL,
    lease_valid boolean NOT NULL
);
CREATE OR REPLACE FUNCTION history_steps_log() RETURNS trigger LANGUAGE plpgsql
SET search_path = public, pg_catalog AS $$
BEGIN
    INSERT INTO public.history_steps
    SELECT NEW.run_id, NEW.name, NEW.state, NEW.attempt, extract(epoch FROM clock_timestamp()),
           EXISTS (SELECT 1 FROM pgqueue.runs r
                    WHERE r.id = NEW.run_id AND r.state = 'running'
                      AND r.attempt = NEW.attempt AND r.lease_expires_at > now());
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS history_steps_log ON pgqueue.steps;
CREATE TRIGGER history_steps_log AFTER INSERT OR UPDATE ON pgqueue.steps FOR EACH ROW
EXECUTE FUNCTION history_steps_log();
"""


def install(conn: psycopg.Connection[Any]) -> None:
    """The history's tables and triggers, in the scenario's (test) database."""
    conn.execute(DDL)


def read(
    dsn: str,
    limits: Mapping[str, tuple[int | None, int | None]],
    acknowledged: Iterable[tuple[float, int]] = (),
    rolled_back: Iterable[tuple[float, int]] = (),
    cron_until: float = math.inf,
) -> History:
    """The whole history of a scenario that ran against `dsn`: what the producer says
    (`acknowledged` and `rolled_back`: (time, run id)), what the task app and the
    triggers recorded, and the final state of every run. Cron runs created after
    `cron_until` (when the scenario stopped waiting for runs to finish) are left out."""
    h = History(limits=dict(limits))
    h.add(*(Enqueued(at, run) for at, run in acknowledged))
    h.add(*(RolledBack(at, run) for at, run in rolled_back))
    with psycopg.connect(dsn, autocommit=True) as c:
        changes = c.execute(
            "SELECT run_id, at, old_state, new_state, old_token, new_token, new_attempt,"
            " old_valid, old_expires, writer, error FROM history_runs ORDER BY at"
        ).fetchall()
        steps = c.execute(
            "SELECT run_id, name, attempt, at, lease_valid FROM history_steps"
            " WHERE state = 'succeeded'"
        ).fetchall()
        execs = c.execute(
            "SELECT kind, run_id, attempt, token, queue, grp, step, pid, started, ended"
            " FROM chaos_exec"
        ).fetchall()
        runs = c.execute(
            "SELECT id, state, idempotency_key, extract(epoch FROM run_at)::float8,"
            " extract(epoch FROM created_at)::float8 FROM pgqueue.runs"
        ).fetchall()
    for change in changes:
        h.add(*_events_of_change(*change))
    h.add(
        *(StepStored(at, run, step=name, attempt=a, lease_valid=v) for run, name, a, at, v in steps)
    )
    for kind, run, attempt, token, queue, grp, step, pid, started, ended in execs:
        if kind != "step":
            h.add(Started(started, run, attempt=attempt, token=token, pid=pid))
        h.add(
            Effect(
                started,
                run,
                attempt=attempt,
                token=token,
                queue=queue,
                group=grp,
                step=step if kind == "step" else None,
                end=ended,
                pid=pid,
            )
        )
    h.add(*_rejected(h))
    end = max((e.at for e in h.events), default=0.0)
    for run, state, key, run_at, created in runs:
        h.add(Final(end, run, state=state))
        if key and key.startswith(SCHEDULE_KEY) and created <= cron_until:
            schedule = key.removeprefix(SCHEDULE_KEY).rpartition("@")[0]
            # the tick is the run's due time, not its key: two runs of one tick under
            # two keys are caught too
            h.add(CronTick(created, run, schedule=schedule, tick=f"{run_at:.3f}"))
    return h


def _rejected(h: History) -> list[OutcomeRejected]:
    """An OutcomeRejected for each task body that returned without an accepted outcome
    of its attempt."""
    accepted = {(o.run, o.writer or o.holder) for o in h.of(OutcomeWritten)}
    return [
        OutcomeRejected(e.end, e.run, token=e.token)
        for e in h.of(Effect)
        if e.step is None
        and e.end is not None
        and e.token is not None
        and (e.run, e.token) not in accepted
    ]


def _events_of_change(
    run: int,
    at: float,
    old_state: str | None,
    new_state: str | None,
    old_token: str | None,
    new_token: str | None,
    attempt: int | None,
    old_valid: bool,
    old_expires: float | None,
    writer: str | None,
    error: str | None,
) -> list[Any]:
    out: list[Any] = []
    held = old_state == "running" and old_token is not None
    if new_state == "running" and new_token is not None and new_token != old_token:
        if held and not old_valid:
            # claimed again straight from an expired lease (no requeue between): the old
            # attempt lost its lease, and its permit, when the lease expired
            lost_at = min(at, old_expires) if old_expires is not None else at
            out.append(LeaseLost(lost_at, run, token=old_token or "", why="rescued"))
        out.append(
            Claimed(
                at,
                run,
                attempt=attempt or 0,
                token=new_token,
                while_held=old_token if held and old_valid else None,
            )
        )
    elif held and new_state == "running" and new_token == old_token:
        out.append(Renewed(at, run, token=old_token or "", lease_valid=old_valid))
    elif held and new_state != "running":
        if error is not None and error.startswith("lease expired") and writer is None:
            # lost when it expired, not when the rescuer got to it: from then on the
            # claim counts its permit as free
            lost_at = min(at, old_expires) if old_expires is not None else at
            out.append(LeaseLost(lost_at, run, token=old_token or "", why="rescued"))
        elif new_state == "canceled" and writer is None:
            out.append(LeaseLost(at, run, token=old_token or "", why="canceled"))
        else:
            out.append(
                OutcomeWritten(
                    at,
                    run,
                    state=new_state or "",
                    writer=writer,
                    holder=old_token,
                    lease_valid=old_valid,
                )
            )
    elif writer is not None and new_state != "running":
        # an outcome written to a run that no attempt held (rescued, or finished)
        out.append(
            OutcomeWritten(
                at, run, state=new_state or "", writer=writer, holder=None, lease_valid=False
            )
        )
    if old_state != new_state and (old_state in TERMINAL or new_state in TERMINAL):
        out.append(Terminal(at, run, old_state=old_state or "", new_state=new_state or ""))
    return out
