"""Dependencies between runs (task.options(after=...), pgqueue.enqueue(..., after => ...)),
against a real database, without workers: the statements a worker and an operator run
(claim, complete, cancel, bulk cancel, rescue, delete) finish the dependencies, and the
triggers of migration 0028 hold, release and cancel their dependents in the same
transaction (docs/flow_control.md, Dependencies)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import sql as _sql
from pgqueue.worker._completer import complete_params
from pgqueue.worker.maintenance.rescuer import Rescuer
from pgqueue.worker.records import Outcome
from tests.cli.helpers import cli
from tests.helpers import wait_until
from tests.worker import parts

Conn = psycopg.Connection[Any]


@pytest.fixture
def step(app: pgqueue.App) -> pgqueue.Task[Any, Any]:
    @app.task(name="step")
    def step(x: int = 0) -> int:
        return x

    return step


def row(conn: Conn, run_id: int) -> dict[str, Any]:
    cur = conn.execute(
        "SELECT state, run_at, after, after_due, on_dependency_failure, cancel_reason,"
        " has_dependents FROM pgqueue.runs WHERE id = %s",
        (run_id,),
    )
    values = cur.fetchone()
    assert values is not None, run_id
    return dict(zip([c.name for c in cur.description or ()], values, strict=True))


def state(conn: Conn, run_id: int) -> str:
    return str(row(conn, run_id)["state"])


def complete(dsn: str, outcomes: dict[int, str]) -> None:
    """Claim these runs (and whatever queued run comes before them) unless they are
    running, and write their outcomes with complete.sql, as a worker does:
    {run id: "succeeded" | "failed"}."""
    parts.claim(dsn, 1000)
    with psycopg.connect(dsn) as c:
        tokens = dict(
            c.execute(
                "SELECT id, lease_token::text FROM pgqueue.runs WHERE id = ANY(%s)",
                (list(outcomes),),
            ).fetchall()
        )
    batch = []
    for run_id, outcome in outcomes.items():
        token = tokens[run_id]
        if outcome == "succeeded":
            batch.append(Outcome(run_id, token, "succeeded", result="1"))
        else:
            batch.append(Outcome(run_id, token, "failed", error="boom", error_kind="error"))
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(_sql.query("complete"), complete_params(batch, parts.WORKER_ID))


def test_a_run_waits_for_every_dependency_and_no_claim_takes_it(
    app: pgqueue.App, step: Any, conn: Conn, dsn: str
) -> None:
    a, b = step.enqueue(1), step.enqueue(2)
    c = step.options(after=[b, a.id, a]).enqueue(3)  # handles or ids, in any order, repeated
    waiting = row(conn, c.id)
    assert waiting["state"] == "waiting"
    assert waiting["after"] == sorted([a.id, b.id])
    assert waiting["on_dependency_failure"] == "cancel"
    assert waiting["run_at"] == datetime(9999, 12, 31, tzinfo=UTC)
    assert row(conn, a.id)["has_dependents"] and row(conn, b.id)["has_dependents"]
    assert app.get_run(c.id).waiting_for == [a.id, b.id]
    assert app.get_run(c.id).after == [a.id, b.id]
    # a claim takes the two dependencies, never the dependent
    assert sorted(r.id for r in parts.claim(dsn, 10)) == [a.id, b.id]
    complete(dsn, {a.id: "succeeded"})
    assert state(conn, c.id) == "waiting"
    assert app.get_run(c.id).waiting_for == [b.id]
    complete(dsn, {b.id: "succeeded"})
    released = row(conn, c.id)
    assert released["state"] == "queued" and released["run_at"] <= datetime.now(UTC)
    assert app.get_run(c.id).waiting_for is None
    assert [r.id for r in parts.claim(dsn, 10)] == [c.id]


def test_release_wakes_idle_workers_in_the_finishing_transaction(
    step: Any, conn: Conn, dsn: str
) -> None:
    a = step.enqueue()
    c = step.options(after=[a]).enqueue()
    parts.claim(dsn, 1)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgqueue_queued")
        with psycopg.connect(dsn) as finisher:
            finisher.execute(
                "UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now(),"
                " worker_id = NULL, lease_token = NULL, lease_expires_at = NULL WHERE id = %s",
                (a.id,),
            )
            # released in the transaction that finished its dependency, seen at its commit
            assert state(conn, c.id) == "waiting"
        assert state(conn, c.id) == "queued"
        heard = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
        assert heard == ["default"]


def test_a_released_run_keeps_its_own_due_time(step: Any, conn: Conn, dsn: str) -> None:
    a = step.enqueue()
    later = step.options(after=[a], delay=3600).enqueue()
    due = row(conn, later.id)["after_due"]
    assert due > datetime.now(UTC) + timedelta(minutes=59)
    complete(dsn, {a.id: "succeeded"})
    released = row(conn, later.id)
    assert (released["state"], released["run_at"]) == ("scheduled", due)


@pytest.mark.parametrize(
    ("end", "policy", "expected", "reason"),
    [
        ("succeeded", None, "queued", None),
        ("failed", None, "canceled", "dependency #{a} failed"),
        ("canceled", None, "canceled", "dependency #{a} was canceled"),
        ("failed", "run", "queued", None),
        ("canceled", "run", "queued", None),
    ],
)
def test_a_dependency_finished_before_the_enqueue(
    step: Any,
    conn: Conn,
    end: str,
    policy: str | None,
    expected: str,
    reason: str | None,
) -> None:
    a = step.enqueue()
    conn.execute(
        "UPDATE pgqueue.runs SET state = %s, finished_at = now() WHERE id = %s", (end, a.id)
    )
    c = step.options(after=[a], on_dependency_failure=policy).enqueue()
    found = row(conn, c.id)
    assert found["state"] == expected
    assert found["cancel_reason"] == (reason and reason.format(a=a.id))
    assert not row(conn, a.id)["has_dependents"]  # nothing to release: no trigger


def test_a_dependency_that_does_not_exist_is_a_clear_error(
    app: pgqueue.App, step: Any, conn: Conn
) -> None:
    a = step.enqueue()
    before = conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone()
    with pytest.raises(pgqueue.RunNotFound, match=r"run 987654 named in after= does not exist"):
        step.options(after=[a, 987654]).enqueue()
    with pytest.raises(pgqueue.RunNotFound, match="987654"):
        step.options(after=[987654]).enqueue_many([(1,), (2,)])
    with pytest.raises(pgqueue.RunNotFound, match="987654"):
        step.options(after=lambda x: [a.id] if x == 1 else [987654]).enqueue_many([(1,), (2,)])

    async def main() -> None:
        await step.options(after=[987654]).enqueue_async()

    with pytest.raises(pgqueue.RunNotFound, match="987654"):
        asyncio.run(main())
    # nothing of any of them was written
    assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == before
    with pytest.raises(psycopg.errors.ForeignKeyViolation) as exc:
        conn.execute("SELECT pgqueue.enqueue('t', after => array[987654]::bigint[])")
    assert exc.value.diag.constraint_name == "runs_after_exists"


@pytest.mark.parametrize(
    ("after", "policy", "message"),
    [
        ("3", None, "after= must be a list"),
        (3, None, "after= must be a list"),
        ([True], None, "RunHandles or run ids"),
        (["3"], None, "RunHandles or run ids"),
        ([2**63], None, "64-bit integers"),
        ([1], "skip", "on_dependency_failure must be"),
        (None, "run", "on_dependency_failure needs after="),
    ],
)
def test_options_are_checked(step: Any, after: Any, policy: Any, message: str) -> None:
    with pytest.raises(pgqueue.UserError, match=message):
        step.options(after=after, on_dependency_failure=policy).enqueue()


def test_an_empty_list_is_no_dependency(step: Any, conn: Conn) -> None:
    h = step.options(after=[]).enqueue()
    assert row(conn, h.id)["state"] == "queued" and row(conn, h.id)["after"] is None
    x = conn.execute("SELECT pgqueue.enqueue('t', after => '{}'::bigint[])").fetchone()
    assert x is not None and row(conn, x[0])["after"] is None


# Every way a run ends, and what its two dependents become: one with the default policy
# ('cancel') and one with 'run'.
def _complete_ok(app: pgqueue.App, dsn: str, run_id: int) -> None:
    complete(dsn, {run_id: "succeeded"})


def _complete_failed(app: pgqueue.App, dsn: str, run_id: int) -> None:
    complete(dsn, {run_id: "failed"})


def _cancel(app: pgqueue.App, dsn: str, run_id: int) -> None:
    assert app.cancel(run_id, reason="operator")


def _cancel_running(app: pgqueue.App, dsn: str, run_id: int) -> None:
    parts.claim(dsn, 10)
    assert app.cancel(run_id)


def _bulk_cancel(app: pgqueue.App, dsn: str, run_id: int) -> None:
    # (its group alone: a dependent released meanwhile is queued too, and would match)
    assert app.cancel_where(state="queued", group="first", reason="bulk") == 1


def _rescue_to_failed(app: pgqueue.App, dsn: str, run_id: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("UPDATE pgqueue.runs SET max_attempts = 1 WHERE id = %s", (run_id,))
    parts.claim(dsn, 10)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "UPDATE pgqueue.runs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            (run_id,),
        )

    async def main() -> None:
        async with parts.pool(dsn) as pool:
            await Rescuer(pool, ["default"], interval=0.25).tick()

    asyncio.run(main())


def _delete_unfinished(app: pgqueue.App, dsn: str, run_id: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DELETE FROM pgqueue.runs WHERE id = %s", (run_id,))


@pytest.mark.parametrize(
    ("finish", "end", "reason"),
    [
        (_complete_ok, "succeeded", None),
        (_complete_failed, "failed", "dependency #{a} failed"),
        (_cancel, "canceled", "dependency #{a} was canceled"),
        (_cancel_running, "canceled", "dependency #{a} was canceled"),
        (_bulk_cancel, "canceled", "dependency #{a} was canceled"),
        (_rescue_to_failed, "failed", "dependency #{a} failed"),
        (_delete_unfinished, None, "dependency #{a} was deleted"),
    ],
)
def test_every_way_a_dependency_ends_releases_or_cancels_its_dependents(
    app: pgqueue.App,
    step: Any,
    conn: Conn,
    dsn: str,
    finish: Callable[[pgqueue.App, str, int], None],
    end: str | None,
    reason: str | None,
) -> None:
    a = step.options(group="first").enqueue()
    cancel = step.options(after=[a]).enqueue()
    run = step.options(after=[a], on_dependency_failure="run").enqueue()
    finish(app, dsn, a.id)
    if end is None:
        assert conn.execute("SELECT id FROM pgqueue.runs WHERE id = %s", (a.id,)).fetchone() is None
    else:
        assert state(conn, a.id) == end
    assert state(conn, run.id) == "queued"
    if reason is None:
        assert state(conn, cancel.id) == "queued"
    else:
        assert (state(conn, cancel.id), row(conn, cancel.id)["cancel_reason"]) == (
            "canceled",
            reason.format(a=a.id),
        )


def test_a_cancel_cascades_down_a_long_chain_in_one_transaction(
    app: pgqueue.App, step: Any, conn: Conn
) -> None:
    """Level by level in a loop, not a trigger per level: 3,000 levels need no stack."""
    head = step.enqueue()
    chain = [head.id]
    with app.connection() as c:
        for _ in range(3000):
            chain.append(step.options(after=[chain[-1]], conn=c).enqueue().id)
    side = step.options(after=[chain[10]], on_dependency_failure="run").enqueue()
    beyond = step.options(after=[side]).enqueue()
    assert app.cancel(head.id, reason="stop")
    states = dict(
        conn.execute("SELECT id, state FROM pgqueue.runs WHERE id = ANY(%s)", (chain,)).fetchall()
    )
    assert set(states.values()) == {"canceled"}
    reasons = dict(
        conn.execute(
            "SELECT id, cancel_reason FROM pgqueue.runs WHERE id = ANY(%s)", (chain[1:4],)
        ).fetchall()
    )
    assert reasons == {
        chain[1]: f"dependency #{head.id} was canceled",
        chain[2]: f"dependency #{chain[1]} was canceled (dependency #{head.id} was canceled)",
        chain[3]: f"dependency #{chain[2]} was canceled (dependency #{head.id} was canceled)",
    }
    assert state(conn, side.id) == "queued"  # 'run': released when its dependency ended
    assert state(conn, beyond.id) == "waiting"  # its own dependency has not finished


def test_two_dependencies_finished_by_two_transactions_at_once(
    step: Any, conn: Conn, dsn: str
) -> None:
    """Each finisher locks the dependent: the second reads the first's outcome after it
    committed, and releases it. Neither alone would."""
    a, b = step.enqueue(), step.enqueue()
    c = step.options(after=[a, b]).enqueue()
    finish = "UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now() WHERE id = %s"
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        first.execute(finish, (a.id,))  # holds c's row lock until it commits
        done = threading.Event()

        def other() -> None:
            second.execute(finish, (b.id,))  # waits for c's lock
            second.commit()
            done.set()

        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.3)
        assert not done.is_set()
        assert state(conn, c.id) == "waiting"
        first.commit()
        thread.join(10)
    assert state(conn, c.id) == "queued"


@pytest.mark.parametrize("first", ["enqueue", "finish"])
def test_an_enqueue_racing_the_end_of_its_dependency(
    app: pgqueue.App, step: Any, conn: Conn, dsn: str, first: str
) -> None:
    """The enqueue locks the dependency until it commits: a finisher that comes second
    waits for it and then sees the new dependent; an enqueue that comes second waits for
    the finisher and then sees the dependency finished. Either way the run is released."""
    a = step.enqueue()
    finish = "UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now() WHERE id = %s"
    made: list[int] = []
    with psycopg.connect(dsn) as enqueuer, psycopg.connect(dsn) as finisher:

        def enqueue() -> None:
            made.append(step.options(after=[a], conn=enqueuer).enqueue().id)

        def end() -> None:
            finisher.execute(finish, (a.id,))

        one, two = (enqueue, end) if first == "enqueue" else (end, enqueue)
        one()
        thread = threading.Thread(target=two)
        thread.start()
        time.sleep(0.3)
        assert thread.is_alive()  # waits for the first one's lock on the dependency
        (enqueuer if first == "enqueue" else finisher).commit()
        thread.join(10)
        (finisher if first == "enqueue" else enqueuer).commit()
    assert state(conn, made[0]) == "queued"


def test_a_second_end_of_a_dependency_changes_nothing(
    app: pgqueue.App, step: Any, conn: Conn, dsn: str
) -> None:
    """The dependencies are read again at each end, not counted down: a dependency that an
    operator retries and that ends again does not stand in for one still running."""
    a, b = step.enqueue(), step.enqueue()
    c = step.options(after=[a, b]).enqueue()
    finish = "UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now() WHERE id = %s"
    conn.execute(finish, (a.id,))
    assert app.retry(a.id)
    conn.execute(finish, (a.id,))
    assert state(conn, c.id) == "waiting"
    conn.execute(finish, (b.id,))
    assert state(conn, c.id) == "queued"


def test_enqueue_many_shares_a_list_or_takes_one_per_item(step: Any, conn: Conn) -> None:
    a, b = step.enqueue(), step.enqueue()
    shared = step.options(after=[a, b]).enqueue_many([(1,), (2,), (3,)])
    assert {row(conn, h.id)["state"] for h in shared} == {"waiting"}
    assert {tuple(row(conn, h.id)["after"]) for h in shared} == {(a.id, b.id)}
    per_item = step.options(
        after=lambda x: [a] if x == 1 else [] if x == 2 else [b.id]
    ).enqueue_many([(1,), (2,), (3,)])
    assert [row(conn, h.id)["after"] for h in per_item] == [[a.id], None, [b.id]]
    assert [state(conn, h.id) for h in per_item] == ["waiting", "queued", "waiting"]


def test_uniqueness_and_keys_with_dependencies(app: pgqueue.App, step: Any, conn: Conn) -> None:
    a = step.enqueue()
    with pytest.raises(pgqueue.UserError, match="unique_while='active' or 'retained'"):
        step.options(after=[a], unique_key="k").enqueue()
    with pytest.raises(pgqueue.UserError, match="unique_while='active' or 'retained'"):
        step.options(after=[a], unique_key="k", debounce=5).enqueue()
    first = step.options(after=[a], unique_key="k", unique_while="active").enqueue()
    again = step.options(after=[a], unique_key="k", unique_while="active").enqueue()
    assert (again.id, again.created) == (first.id, False)
    assert state(conn, first.id) == "waiting"
    keyed = step.options(after=[a], idempotency_key="i").enqueue()
    assert step.options(after=[a], idempotency_key="i").enqueue().id == keyed.id
    conn.execute(
        "UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now() WHERE id = %s", (a.id,)
    )
    assert state(conn, first.id) == "queued" and state(conn, keyed.id) == "queued"


def test_from_sql(step: Any, conn: Conn) -> None:
    a = step.enqueue()
    made = conn.execute(
        "SELECT pgqueue.enqueue('step', after => array[%s]::bigint[]),"
        " pgqueue.enqueue('step', after => array[%s]::bigint[], on_dependency_failure => 'run')",
        (a.id, a.id),
    ).fetchone()
    assert made is not None
    assert [row(conn, i)["state"] for i in made] == ["waiting", "waiting"]
    assert [row(conn, i)["on_dependency_failure"] for i in made] == ["cancel", "run"]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="on_dependency_failure"):
        conn.execute(
            "SELECT pgqueue.enqueue('step', after => array[1]::bigint[],"
            " on_dependency_failure => 'skip')"
        )
    conn.execute("SELECT pgqueue.cancel(%s)", (a.id,))
    assert [state(conn, i) for i in made] == ["canceled", "queued"]


def test_a_batch_counts_a_member_canceled_by_its_dependency(
    app: pgqueue.App, step: Any, conn: Conn
) -> None:
    @app.task(name="done")
    def done(batch: dict[str, Any]) -> None: ...

    a = step.enqueue()
    conn.execute(
        "UPDATE pgqueue.runs SET state = 'failed', finished_at = now() WHERE id = %s", (a.id,)
    )
    with app.batch(on_complete=done) as batch:
        member = step.options(after=[a]).enqueue()
    assert state(conn, member.id) == "canceled"
    wait_until(lambda: app.get_batch(batch.id).done, 10, message="the batch to settle")
    assert app.get_batch(batch.id).canceled == 1


def test_runs_show_and_the_dashboard_say_what_it_waits_for(
    app: pgqueue.App, step: Any, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = step.enqueue(), step.enqueue()
    c = step.options(after=[a, b]).enqueue()
    code, out, _ = cli(capsys, "runs", "show", str(c.id), "--dsn", dsn)
    assert code == 0
    assert f"waiting for runs #{a.id}, #{b.id}" in out
    assert f"after: runs #{a.id}, #{b.id}" in out
    from starlette.testclient import TestClient

    from pgqueue.dashboard import asgi

    with TestClient(asgi(dsn, upstream_auth=True)) as web:
        body = web.get(f"/api/runs/{c.id}").json()
        assert f"waiting for runs #{a.id}, #{b.id}" in body["why"]
        page = web.get(f"/runs/{c.id}").text
        assert f'<a href="/runs/{a.id}">#{a.id}</a>' in page
