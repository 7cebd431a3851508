"""pgqueue.RunState against a migrated database: the members are the values the
`runs_state_check` constraint allows, and a member travels to PostgreSQL and to JSON as
its plain value."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
from psycopg import sql

import pgqueue
from pgqueue import states
from pgqueue.states import RunState, StepState
from pgqueue.worker import _completer, _transitions, attempt

Conn = psycopg.Connection[Any]


def test_the_members_are_the_states_the_check_constraint_allows(conn: Conn) -> None:
    row = conn.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conname = 'runs_state_check' AND conrelid = 'pgqueue.runs'::regclass"
    ).fetchone()
    assert row is not None
    allowed = re.findall(r"'([a-z_]+)'::text", row[0])
    assert allowed == [s.value for s in RunState]
    assert tuple(RunState) == states.STATES


def test_step_states_are_those_the_steps_check_constraint_allows(conn: Conn) -> None:
    row = conn.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conname = 'steps_state_check' AND conrelid = 'pgqueue.steps'::regclass"
    ).fetchone()
    assert row is not None
    allowed = re.findall(r"'([a-z_]+)'::text", row[0])
    assert sorted(allowed) == sorted(s.value for s in StepState)
    assert pgqueue.StepState is StepState and "StepState" in pgqueue.__all__


def test_the_state_sets_split_the_states_into_live_and_finished() -> None:
    assert set(states.LIVE_STATES) | set(states.FINISHED_STATES) == set(RunState)
    assert not set(states.LIVE_STATES) & set(states.FINISHED_STATES)
    assert {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELED} == states.TERMINAL_STATES
    assert RunState.CANCELED in states.TERMINAL_STATES and "canceled" in states.TERMINAL_STATES


def test_pgqueue_exports_the_enum() -> None:
    assert pgqueue.RunState is RunState and "RunState" in pgqueue.__all__
    assert RunState("waiting") is RunState.WAITING


def test_psycopg_sends_a_member_as_its_text(app: pgqueue.App, conn: Conn) -> None:
    queued = app.enqueue_by_name("states.a").id
    app.enqueue_by_name("states.b", delay=3600)
    # Text and binary parameters, a list of members as an array, a literal in a
    # composed statement (the dashboard's state lists): the value, never the name.
    assert conn.execute("SELECT %s::text, %b::text", [RunState.QUEUED] * 2).fetchone() == (
        "queued",
        "queued",
    )
    ids = conn.execute("SELECT id FROM pgqueue.runs WHERE state = %s", [RunState.QUEUED]).fetchall()
    assert ids == [(queued,)]
    (live,) = conn.execute(
        "SELECT count(*) FROM pgqueue.runs WHERE state = ANY(%s)", [list(states.LIVE_STATES)]
    ).fetchone() or (None,)
    assert live == 2
    assert sql.Literal(RunState.SCHEDULED).as_string(conn) == "'scheduled'"
    # And the text a query returns equals the member.
    run = app.get_run(queued)
    assert run.state == RunState.QUEUED and not run.finished


def test_json_encodes_a_member_as_its_plain_value() -> None:
    assert json.dumps(RunState.FAILED) == '"failed"'
    assert json.dumps({RunState.SUCCEEDED: [RunState.WAITING]}) == '{"succeeded": ["waiting"]}'
    outcome = _completer.Outcome(7, "token", RunState.SCHEDULED, delay=5.0, refund=True)
    (written,) = json.loads(_completer.document([outcome]))
    assert written["state"] == "scheduled"


def test_the_worker_binds_the_states_as_plain_strings() -> None:
    """Per-run code compares and builds outcomes with exact str values, equal to the
    members, and TERMINAL_STATES holds the same interned strings."""
    bound = [attempt.SCHEDULED, attempt.QUEUED, attempt.SUCCEEDED, attempt.FAILED]
    bound += [_completer.SUCCEEDED, *_completer.DEFERRED, *_transitions._FINISHED_BY_ATTEMPT]
    assert all(type(s) is str and s in set(RunState) for s in bound)
    assert all(type(s) is str for s in states.TERMINAL_STATES)
    assert attempt.SUCCEEDED is next(s for s in states.TERMINAL_STATES if s == "succeeded")
