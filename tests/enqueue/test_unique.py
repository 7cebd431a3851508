"""Uniqueness scopes (docs/flow_control.md): unique_key, unique_while,
unique_for, on_duplicate, debounce, per-item keys in enqueue_many."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from pgqueue.errors import InvalidArguments, UserError
from tests.apps import batched as flow
from tests.apps.basic import EFFECTS_DDL
from tests.helpers import ROOT, WorkerProcess, effect_tags, scalar_conn, wait_until


def _start(conn: psycopg.Connection[Any], run_id: int) -> None:
    """Put a run where a worker's claim puts it (running, leased, started)."""
    conn.execute(
        "UPDATE pgqueue.runs SET state = 'running', attempt = attempt + 1, started_at = now(),"
        " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '30 s'"
        " WHERE id = %s",
        (run_id,),
    )


def _finish(conn: psycopg.Connection[Any], run_id: int) -> None:
    conn.execute(
        "UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now(), lease_token = NULL,"
        " lease_expires_at = NULL WHERE id = %s",
        (run_id,),
    )


@pytest.fixture
def member(dsn: str) -> Any:
    flow.app.configure(dsn=dsn)  # the test tasks' App, on this test's database
    yield flow.member
    flow.app.close()


HAMMER = (
    "from tests.apps.batched import hammer; import sys; "
    "hammer(sys.argv[1], int(sys.argv[2]), *sys.argv[3:])"
)


def _hammer(dsn: str, conn: psycopg.Connection[Any], key: str, scope: str) -> set[int]:
    """Four processes enqueue `key` 1,000 times each, released together; asserts that one
    enqueue in all created a run, and returns the run ids the 4,000 handles name."""
    outputs = _enqueue_together(dsn, conn, key, [(1000, scope)] * 4)
    assert sum(int(out[0]) for out in outputs) == 1  # one enqueue of 4,000 created a run
    return {int(i) for out in outputs for i in out[1:]}


def _enqueue_together(
    dsn: str, conn: psycopg.Connection[Any], key: str, each: list[tuple[object, ...]]
) -> list[list[str]]:
    """One process per element of `each` (the arguments after the key of
    tests.apps.batched.hammer: times, scope, and on_duplicate), released together; their
    outputs (how many runs each created, then the run ids its handles name), split."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PGQUEUE_DSN": dsn}
    with psycopg.connect(dsn, autocommit=True) as gate:
        gate.execute("SELECT pg_advisory_lock(7)")  # holds them back until all are ready
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", HAMMER, key, *map(str, args)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for args in each
        ]

        def at_the_gate() -> bool:
            dead = [p.returncode for p in procs if p.poll() is not None]
            assert not dead, f"an enqueuer exited before the gate opened: {dead}"
            row = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 7"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND NOT granted"
            ).fetchone()
            return row is not None and row[0] >= len(procs)

        # interpreters starting at once on a loaded 2-core machine: a generous deadline
        wait_until(at_the_gate, timeout=60, message="the enqueuers to wait at the gate")
        gate.execute("SELECT pg_advisory_unlock(7)")
        outputs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return outputs


@pytest.mark.parametrize("scope", ["queued", "active", "retained"])
def test_four_processes_enqueueing_one_key_a_thousand_times_create_one_run_per_window(
    dsn: str, conn: psycopg.Connection[Any], scope: str
) -> None:
    key = f"reindex:{scope}"
    first = _hammer(dsn, conn, key, scope)
    assert len(first) == 1
    (run_id,) = first
    # end the window: the run starts (queued), finishes (active), is pruned (retained)
    if scope == "retained":
        conn.execute("DELETE FROM pgqueue.runs WHERE id = %s", (run_id,))
    else:
        _start(conn, run_id)
        if scope == "active":
            _finish(conn, run_id)
    second = _hammer(dsn, conn, key, scope)
    assert len(second) == 1 and second != first
    runs = conn.execute("SELECT id FROM pgqueue.runs WHERE unique_key = %s ORDER BY id", (key,))
    expected = sorted(second if scope == "retained" else first | second)
    assert [r[0] for r in runs] == expected


def test_scope_queued_ends_when_the_run_starts(member: Any, conn: psycopg.Connection[Any]) -> None:
    bound = member.options(unique_key="k")  # unique_while="queued" is the default
    first = bound.enqueue(1)
    again = bound.enqueue(2)
    assert first.created and not again.created and again.id == first.id
    _start(conn, first.id)
    second = bound.enqueue(3)
    assert second.created and second.id != first.id
    # the scope is the first start: a started run that goes back to waiting stays out
    conn.execute(
        "UPDATE pgqueue.runs SET state = 'queued', lease_token = NULL, lease_expires_at = NULL"
        " WHERE id = %s",
        (first.id,),
    )
    assert bound.enqueue(4).id == second.id


def test_scope_active_ends_when_the_run_is_terminal(
    member: Any, conn: psycopg.Connection[Any]
) -> None:
    bound = member.options(unique_key="k", unique_while="active")
    first = bound.enqueue(1)
    _start(conn, first.id)
    running = bound.enqueue(2)
    assert not running.created and running.id == first.id
    _finish(conn, first.id)
    after = bound.enqueue(3)
    assert after.created and after.id != first.id


def test_scope_retained_ends_when_the_run_is_pruned(
    member: Any, conn: psycopg.Connection[Any]
) -> None:
    bound = member.options(unique_key="k", unique_while="retained")
    first = bound.enqueue(1)
    _start(conn, first.id)
    _finish(conn, first.id)
    assert bound.enqueue(2).id == first.id
    conn.execute("DELETE FROM pgqueue.runs WHERE id = %s", (first.id,))
    assert bound.enqueue(3).created


def test_unique_for_limits_the_scope_to_a_window_after_the_enqueue(
    member: Any, conn: psycopg.Connection[Any]
) -> None:
    bound = member.options(unique_key="k", unique_while="retained", unique_for=60)
    first = bound.enqueue(1)
    assert bound.enqueue(2).id == first.id
    conn.execute(
        "UPDATE pgqueue.runs SET created_at = now() - interval '61 s' WHERE id = %s",
        (first.id,),
    )
    later = bound.enqueue(3)
    assert later.created and later.id != first.id
    assert bound.enqueue(4).id == later.id
    # the old run keeps its key for inspection; it is out of every scope
    assert conn.execute(
        "SELECT unique_key, unique_while FROM pgqueue.runs WHERE id = %s", (first.id,)
    ).fetchone() == ("k", None)


def test_replace_gives_the_waiting_run_the_new_arguments_and_due_time(
    member: Any, conn: psycopg.Connection[Any]
) -> None:
    bound = member.options(unique_key="k", on_duplicate="replace")
    first = bound.options(delay=600).enqueue(1)
    again = bound.enqueue(2, fail_every=3)
    assert not again.created and again.id == first.id
    args, kwargs, state, late = conn.execute(
        "SELECT args, kwargs, state, run_at > now() + interval '1 minute' FROM pgqueue.runs"
        " WHERE id = %s",
        (first.id,),
    ).fetchone()  # type: ignore[misc]
    assert (args, kwargs, state, late) == ([2], {"fail_every": 3}, "queued", False)
    _start(conn, first.id)  # started: nothing to replace, a new run is made
    assert bound.enqueue(3).created


def test_debounce_pushes_the_due_time_at_every_enqueue(
    member: Any, conn: psycopg.Connection[Any]
) -> None:
    bound = member.options(unique_key="digest:7", debounce=30)
    first = bound.enqueue(1)
    due1 = conn.execute("SELECT run_at FROM pgqueue.runs WHERE id = %s", (first.id,)).fetchone()
    conn.execute(
        "UPDATE pgqueue.runs SET run_at = run_at - interval '20 s', created_at = created_at"
        " - interval '20 s' WHERE id = %s",
        (first.id,),
    )
    again = bound.enqueue(2)
    assert again.id == first.id and not again.created
    state, args, pushed = conn.execute(
        "SELECT state, args, run_at >= %s FROM pgqueue.runs WHERE id = %s",
        (due1[0] if due1 else None, first.id),
    ).fetchone()  # type: ignore[misc]
    assert (state, args, pushed) == ("scheduled", [2], True)


def test_enqueue_many_takes_a_key_per_item(member: Any, conn: psycopg.Connection[Any]) -> None:
    handles = member.options(unique_key=lambda n: f"user:{n}").enqueue_many(
        [(1,), (2,), (1,), {"n": 3}, (2,)]
    )
    assert [h.created for h in handles] == [True, True, False, True, False]
    assert handles[2].id == handles[0].id and handles[4].id == handles[1].id
    assert len({h.id for h in handles}) == 3
    keys = conn.execute(
        "SELECT unique_key FROM pgqueue.runs WHERE unique_key IS NOT NULL ORDER BY id"
    ).fetchall()
    assert [k for (k,) in keys] == ["user:1", "user:2", "user:3"]


def test_a_unique_key_and_an_idempotency_key_each_keep_their_meaning(
    member: Any, conn: psycopg.Connection[Any]
) -> None:
    first = member.options(idempotency_key="welcome:1", unique_key="k").enqueue(1)
    _start(conn, first.id)
    _finish(conn, first.id)
    # the unique key's scope (queued) is over; the idempotency key holds while retained
    again = member.options(idempotency_key="welcome:1", unique_key="k").enqueue(2)
    assert not again.created and again.id == first.id
    fresh = member.options(unique_key="k").enqueue(3)
    assert fresh.created


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_while": "active"}, "unique_while needs a unique_key"),
        ({"unique_key": "k", "unique_while": "forever"}, "unique_while must be one of"),
        (
            {"unique_key": "k", "on_duplicate": "merge"},
            "on_duplicate must be 'skip', 'replace' or 'cancel_running', not 'merge'",
        ),
        (
            {"unique_key": "k", "unique_while": "queued", "on_duplicate": "cancel_running"},
            "on_duplicate='cancel_running' needs unique_while='active'",
        ),
        (
            {"unique_key": "k", "unique_for": 60, "on_duplicate": "cancel_running"},
            "leave unique_for= out",
        ),
        (
            {"unique_key": "k", "idempotency_key": "i", "on_duplicate": "cancel_running"},
            "an idempotency_key would not",
        ),
        ({"on_duplicate": "cancel_running"}, "on_duplicate needs a unique_key"),
        (
            {"unique_key": "k", "unique_while": "active", "on_duplicate": "replace"},
            "needs unique_while='queued'",
        ),
        ({"unique_key": "k", "debounce": 5, "delay": 3}, "leave delay= and run_at= out"),
        ({"unique_key": "k", "debounce": 0}, "debounce must be more than 0"),
        ({"unique_key": 42}, "unique_key must be a str"),
    ],
)
def test_bad_uniqueness_options_say_what_to_do(
    member: Any, options: dict[str, Any], message: str
) -> None:
    with pytest.raises((InvalidArguments, ValueError), match=message):
        member.options(**options).enqueue(1)


def test_enqueue_many_refuses_one_key_for_all_items(member: Any) -> None:
    with pytest.raises(ValueError, match="pass a function of the run's arguments"):
        member.options(unique_key="k").enqueue_many([(1,), (2,)])


def test_retry_of_a_run_whose_key_a_newer_run_holds_says_what_to_do(
    member: Any, conn: psycopg.Connection[Any]
) -> None:
    bound = member.options(unique_key="k", unique_while="active")
    first = bound.enqueue(1)
    _start(conn, first.id)
    _finish(conn, first.id)
    newer = bound.enqueue(2)
    assert newer.created
    with pytest.raises(UserError, match="a newer run holds its unique key"):
        flow.app.retry(first.id)
    flow.app.cancel(newer.id)
    assert flow.app.retry(first.id)


def test_a_replace_of_a_key_held_by_a_run_not_waiting_is_a_skip(
    member: Any, conn: psycopg.Connection[Any]
) -> None:
    """A key held in a scope of the holder's own (retained, and finished; active, and
    running) leaves a replace nothing to replace: the enqueue returns the holder."""
    kept = member.options(unique_key="r", unique_while="retained").enqueue(1)
    _start(conn, kept.id)
    _finish(conn, kept.id)
    active = member.options(unique_key="a", unique_while="active").enqueue(1)
    _start(conn, active.id)
    for key, holder in (("r", kept), ("a", active)):
        again = member.options(unique_key=key, on_duplicate="replace").enqueue(2)
        assert not again.created and again.id == holder.id
    args = conn.execute(
        "SELECT array_agg(args ORDER BY id) FROM pgqueue.runs WHERE id IN (%s, %s)",
        (kept.id, active.id),
    ).fetchone()
    assert args == ([[1], [1]],)


def _reasons(conn: psycopg.Connection[Any], key: str) -> list[tuple[int, str, str | None]]:
    return conn.execute(
        "SELECT id, state, cancel_reason FROM pgqueue.runs WHERE unique_key = %s ORDER BY id",
        (key,),
    ).fetchall()


def test_cancel_running_replaces_the_run_that_has_not_finished(
    member: Any, conn: psycopg.Connection[Any]
) -> None:
    bound = member.options(unique_key="sync:42", on_duplicate="cancel_running")
    queued = bound.enqueue(1)
    running = bound.enqueue(2)  # replaces the queued one
    assert queued.created and running.created
    _start(conn, running.id)
    with psycopg.connect(flow.app.dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgqueue_cancel")
        newest = bound.enqueue(3)  # replaces the running one: its worker is told
        told = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert told == [str(running.id)]
    assert _reasons(conn, "sync:42") == [
        (queued.id, "canceled", f"replaced by #{running.id}"),
        (running.id, "canceled", f"replaced by #{newest.id}"),
        (newest.id, "queued", None),
    ]
    # a finished run is not replaced: the next enqueue just creates a run
    _start(conn, newest.id)
    _finish(conn, newest.id)
    later = bound.enqueue(4)
    assert later.created
    assert _reasons(conn, "sync:42")[2:] == [
        (newest.id, "succeeded", None),
        (later.id, "queued", None),
    ]


def test_cancel_running_in_enqueue_many_lets_the_last_item_of_a_key_win(
    member: Any, conn: psycopg.Connection[Any]
) -> None:
    handles = member.options(
        unique_key=lambda n: f"user:{n % 2}", on_duplicate="cancel_running"
    ).enqueue_many([(1,), (2,), (3,)])
    assert all(h.created for h in handles)
    first, second, third = (h.id for h in handles)
    assert _reasons(conn, "user:1") == [
        (first, "canceled", f"replaced by #{third}"),
        (third, "queued", None),
    ]
    assert _reasons(conn, "user:0") == [(second, "queued", None)]


def test_cancel_running_cancels_the_child_runs_of_the_run_it_replaces(
    member: Any, conn: psycopg.Connection[Any]
) -> None:
    bound = member.options(unique_key="tree", on_duplicate="cancel_running")
    parent = bound.enqueue(1)
    child = member.options(parent_id=parent.id).enqueue(2)
    newer = bound.enqueue(3)
    assert flow.app.get_run(child.id).state == "canceled"
    assert flow.app.get_run(parent.id).cancel_reason == f"replaced by #{newer.id}"


def test_enqueue_unique_takes_cancel_running_from_sql(conn: psycopg.Connection[Any]) -> None:
    """Position 18 of a run's encoding, written by hand; a producer that does not send
    it (an array of 18) skips as before."""
    run = (
        '[[%s], {}, null, null, "t", "default", 0, 3, null, null, null, null, "k", "active",'
        " null, false, null, null%s]"
    )
    call = "SELECT run_id, run_created FROM pgqueue.enqueue_unique(%s::jsonb, NULL, NULL, true)"
    ((first, _),) = conn.execute(call, (f"[{run % (1, ', true')}]",)).fetchall()
    ((second, created),) = conn.execute(call, (f"[{run % (2, ', true')}]",)).fetchall()
    assert created and second != first
    assert conn.execute(call, (f"[{run % (3, '')}]",)).fetchall() == [(second, False)]
    assert [r[1:] for r in _reasons(conn, "k")] == [
        ("canceled", f"replaced by #{second}"),
        ("queued", None),
    ]
    queued_scope = run.replace('"active"', '"queued"') % (4, ", true")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="cancel_running needs"):
        conn.execute(call, (f"[{queued_scope}]",))


@pytest.mark.slow
def test_fifty_enqueues_of_one_key_with_cancel_running_leave_one_run_to_finish(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Two worker processes run flow.replaceable, which loops until ctx.cancelled (or the
    test's release). A first run is enqueued and left to start; then five processes
    enqueue the same key 49 times in all, at once. Every enqueue creates a run; each one
    cancels the one before it (queued or running: a running one's task sees
    ctx.cancelled); the last one alone runs to the end, once released."""
    conn.execute(EFFECTS_DDL)
    key = "sync:repo"
    with contextlib.ExitStack() as stack:
        for _ in range(2):
            stack.enter_context(
                WorkerProcess(dsn, "tests.apps.batched:app", "--concurrency", "4")
            ).wait_ready()
        first = _enqueue_together(dsn, conn, key, [(1, "active", "cancel_running")])
        first_id = int(first[0][1])
        wait_until(
            lambda: effect_tags(dsn, first_id) == ["started"], message="the first run to start"
        )
        outputs = _enqueue_together(
            dsn, conn, key, [(times, "active", "cancel_running") for times in (10, 10, 10, 10, 9)]
        )
        assert sum(int(out[0]) for out in outputs) == 49  # each enqueue created its run
        conn.execute("INSERT INTO effects (tag) VALUES ('release')")

        def settled() -> list[tuple[int, str, str | None]] | None:
            rows = _reasons(conn, key)
            if any(state not in ("succeeded", "canceled") for _, state, _ in rows):
                return None
            done = scalar_conn(conn, "SELECT count(*) FROM effects WHERE tag = 'done'")
            return rows if done else None

        rows = wait_until(settled, timeout=60, message="the runs of the key to finish")
    ids = [run_id for run_id, _, _ in rows]
    assert len(ids) == 50 and first_id == ids[0]
    states = [state for _, state, _ in rows]
    assert states.count("succeeded") == 1 and states.count("canceled") == 49
    last = ids[-1]  # the newest enqueue is the one that ran to the end
    assert rows[-1] == (last, "succeeded", None)
    for run_id, _, reason in rows[:-1]:
        assert reason is not None
        replacer = int(reason.removeprefix("replaced by #"))
        assert reason == f"replaced by #{replacer}" and replacer in ids and replacer > run_id
    # the first run was running when it was replaced: its task saw ctx.cancelled
    assert effect_tags(dsn, first_id) == ["started", "saw-cancel"]
    finished = conn.execute("SELECT run_id FROM effects WHERE tag = 'done'").fetchall()
    assert finished == [(last,)]
