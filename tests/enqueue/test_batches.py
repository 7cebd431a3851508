"""Batches (docs/flow_control.md): app.batch(), the callback enqueued exactly
once after the last member, pgqueue.batches, batch.wait(); with real worker processes."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import sql as _sql
from pgqueue.errors import UserError
from tests.apps import batched as flow
from tests.apps.basic import EFFECTS_DDL
from tests.helpers import WorkerProcess, scalar, wait_until

APP = "tests.apps.batched:app"


@pytest.fixture
def app(dsn: str, conn: psycopg.Connection[Any]) -> Any:
    conn.execute(EFFECTS_DDL)
    flow.app.configure(dsn=dsn)
    yield flow.app
    flow.app.close()


def callbacks(dsn: str, tag: str) -> list[str]:
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT tag FROM effects WHERE tag LIKE %s ORDER BY id", (f"{tag}:%",)
        ).fetchall()
    return [r[0] for r in rows]


def test_ten_thousand_members_over_three_workers_one_callback_after_the_last(
    dsn: str, app: pgqueue.App
) -> None:
    n, fail_every = 10_000, 97
    with app.batch(on_complete=flow.on_batch_done, kwargs={"tag": "big"}) as batch:
        flow.member.enqueue_many([(i, fail_every) for i in range(1, n // 2 + 1)])
        for i in range(n // 2 + 1, n + 1, 1000):  # enqueue_many and enqueue, both collected
            flow.member.enqueue_many([(j, fail_every) for j in range(i, i + 999)])
            flow.member.enqueue(i + 999, fail_every)
    failed = n // fail_every
    workers = [WorkerProcess(dsn, APP, "--concurrency", "20") for _ in range(3)]
    try:
        for w in workers:
            w.wait_ready()
        state = batch.wait(timeout=240)
        # seen as soon as it exists: by then every member is terminal (the callback's
        # transaction counted the others' committed completions)
        unfinished = scalar(
            dsn,
            "SELECT count(*) FROM pgqueue.runs WHERE batch_id = %s"
            " AND state NOT IN ('succeeded', 'failed', 'canceled')",
            (batch.id,),
        )
    finally:
        for w in workers:
            w.stop()
    assert unfinished == 0
    assert (state.total, state.succeeded, state.failed, state.canceled) == (
        n,
        n - failed,
        failed,
        0,
    )
    assert state.callback_run_id is not None
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE task = 'flow.on_batch_done'") == 1
    with WorkerProcess(dsn, APP, "--burst") as w:
        assert w.wait(60) == 0
    assert callbacks(dsn, "big") == [f"big:{batch.id}:{n}:{n - failed}:{failed}:0"]


def test_a_sigkill_during_the_last_completions_neither_loses_nor_repeats_the_callback(
    dsn: str, app: pgqueue.App
) -> None:
    n = 300
    with app.batch(on_complete=flow.on_batch_done, kwargs={"tag": "kill"}) as batch:
        flow.sturdy_member.enqueue_many([(i, 0.05) for i in range(n)])
    args = ("--concurrency", "10", "--lease-seconds", "2")
    victim = WorkerProcess(dsn, APP, *args)
    others = [WorkerProcess(dsn, APP, *args) for _ in range(2)]
    try:
        for w in (victim, *others):
            w.wait_ready()
        held = (
            "SELECT count(*) FROM pgqueue.runs r JOIN pgqueue.workers w ON w.id = r.worker_id"
            " WHERE r.batch_id = %s AND r.state = 'running' AND w.pid = %s"
        )
        wait_until(
            lambda: (
                batch.state().succeeded >= n - 60 and scalar(dsn, held, (batch.id, victim.pid)) > 0
            ),
            timeout=120,
            message="the last members, some of them on the victim",
        )
        victim.kill()  # it held running members: the others rescue them when leases expire
        wait_until(
            lambda: callbacks(dsn, "kill"), timeout=120, message="the batch's callback to run"
        )
    finally:
        for w in (victim, *others):
            w.stop()
    state = batch.state()
    assert (state.total, state.succeeded, state.failed, state.canceled) == (n, n, 0, 0)
    assert callbacks(dsn, "kill") == [f"kill:{batch.id}:{n}:{n}:0:0"]
    # the victim died holding members, which the others finished after a rescue
    rescued = "SELECT count(*) FROM pgqueue.runs WHERE batch_id = %s AND attempt > 1"
    assert scalar(dsn, rescued, (batch.id,)) > 0
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE task = 'flow.on_batch_done'") == 1


def test_a_batch_joins_the_callers_transaction(dsn: str, app: pgqueue.App) -> None:
    with psycopg.connect(dsn) as conn:
        with pytest.raises(RuntimeError, match="boom"), conn.transaction():
            with app.batch(on_complete=flow.on_batch_done, conn=conn):
                flow.member.options(conn=conn).enqueue(1)
                flow.member.enqueue(2)  # no conn=: the batch's
            raise RuntimeError("boom")
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.batches") == 0
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 0
        with (
            conn.transaction(),
            app.batch(on_complete=flow.on_batch_done, conn=conn) as batch,
        ):
            flow.member.options(conn=conn).enqueue_many([(1,), (2,), (3,)])
    assert app.get_batch(batch.id).total == 3
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE batch_id = %s", (batch.id,)) == 3


def test_an_empty_batch_completes_at_once(app: pgqueue.App, dsn: str) -> None:
    with app.batch(on_complete=flow.on_batch_done, kwargs={"tag": "empty"}) as batch:
        pass
    state = batch.wait(timeout=5)
    assert state.total == 0 and state.callback_run_id is not None
    run = app.get_run(state.callback_run_id)
    assert run.kwargs == {
        "tag": "empty",
        "batch": {"id": batch.id, "total": 0, "succeeded": 0, "failed": 0, "canceled": 0},
    }


def test_canceled_members_count_and_a_retry_does_not_fire_the_callback_again(
    app: pgqueue.App, dsn: str
) -> None:
    with app.batch(on_complete=flow.on_batch_done) as batch:
        handles = flow.member.enqueue_many([(1,), (2,)])
    for h in handles:
        app.cancel(h.id)
    state = batch.wait(timeout=5)
    assert (state.total, state.canceled, state.succeeded) == (2, 2, 0)
    app.retry(handles[0].id)
    assert app.get_batch(batch.id).canceled == 1  # back to waiting: its count is taken back
    with WorkerProcess(dsn, APP, "--burst") as w:
        assert w.wait(60) == 0
    state = app.get_batch(batch.id)
    assert (state.succeeded, state.canceled) == (1, 1)
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE task = 'flow.on_batch_done'") == 1


def test_enqueues_inside_a_batch_must_use_its_connection(app: pgqueue.App, dsn: str) -> None:
    with (
        psycopg.connect(dsn) as other,
        pytest.raises(UserError, match="another connection"),
        app.batch(on_complete=flow.on_batch_done),
    ):
        flow.member.options(conn=other).enqueue(1)
    with (
        pytest.raises(UserError, match="do not nest"),
        app.batch(on_complete=flow.on_batch_done),
        app.batch(on_complete=flow.member),
    ):
        pass
    with pytest.raises(TypeError, match="takes a task"):
        app.batch(on_complete="flow.on_batch_done").__enter__()  # type: ignore[arg-type]
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.batches") == 0


def test_wait_times_out_with_the_counts_so_far(app: pgqueue.App) -> None:
    with app.batch(on_complete=flow.on_batch_done) as batch:
        flow.member.enqueue(1)
    with pytest.raises(TimeoutError, match="0 of 1 members finished"):
        batch.wait(timeout=0.2)


def test_enqueue_async_inside_a_batch_is_refused(app: pgqueue.App) -> None:
    import asyncio

    async def enqueue() -> None:
        await flow.member.enqueue_async(1)

    with (
        pytest.raises(UserError, match=r"enqueue_async inside app\.batch"),
        flow.app.batch(on_complete=flow.on_batch_done),
    ):
        asyncio.run(enqueue())


def test_one_statement_that_cancels_many_members_counts_them_all(
    app: pgqueue.App, dsn: str
) -> None:
    """A bulk action over a large batch in one transaction: the changes noted per row stay
    short (they are summed as they grow), and the commit counts every member."""
    n = 20_000
    with app.batch(on_complete=flow.on_batch_done) as batch:
        flow.member.enqueue_many([(i,) for i in range(n)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgqueue.runs SET state = 'canceled', finished_at = now()"
            " WHERE batch_id = %s AND id %% 2 = 0",
            (batch.id,),
        )
        conn.execute(
            "UPDATE pgqueue.runs SET state = 'failed', finished_at = now()"
            " WHERE batch_id = %s AND id %% 2 = 1",
            (batch.id,),
        )
    state = batch.wait(timeout=5)
    assert (state.total, state.failed, state.canceled, state.succeeded) == (n, n // 2, n // 2, 0)


FINISH = "UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now() WHERE id = ANY(%s)"
FLUSH_NOW = "SET CONSTRAINTS pgqueue.runs_batch_flush IMMEDIATE"  # count before the commit


def callback_runs(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE task = 'flow.on_batch_done'"))


def test_the_commits_of_the_last_members_take_turns_and_the_later_one_settles(
    dsn: str, app: pgqueue.App
) -> None:
    """Two transactions each finish one of the last two members: neither can see the
    other's count, so near a batch's end the count waits for the batch's row lock, and the
    second commit counts after the first committed."""
    with app.batch(on_complete=flow.on_batch_done) as batch:
        first, second = flow.member.enqueue_many([(1,), (2,)])
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        a.execute(FINISH, ([first.id],))
        a.execute(FLUSH_NOW)  # counts 1 of 2, holds the batch's row until it commits
        b_pid = b.info.backend_pid
        errors: list[BaseException] = []

        def finish_second() -> None:
            try:
                b.execute(FINISH, ([second.id],))
                b.execute(FLUSH_NOW)
                b.commit()
            except BaseException as e:  # reported by the test's thread
                errors.append(e)

        t = threading.Thread(target=finish_second)
        t.start()
        wait_until(
            lambda: (
                scalar(dsn, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (b_pid,))
                == "Lock"
            ),
            message="the second commit to wait for the batch's row",
        )
        assert app.get_batch(batch.id).callback_run_id is None
        a.commit()
        t.join(20)
        assert not t.is_alive() and not errors, errors
    state = app.get_batch(batch.id)
    assert (state.total, state.succeeded, state.done) == (2, 2, True)
    assert callback_runs(dsn) == 1


def test_a_batch_whose_last_commits_missed_each_other_is_settled_by_the_rescuer(
    dsn: str, app: pgqueue.App
) -> None:
    """Two transactions finish 1,200 members each, far from the end as each sees it: both
    commit without settling (the case the settlement at commit cannot see). A worker's
    rescuer finds the batch complete and enqueues the callback, once."""
    n = 2400
    with app.batch(on_complete=flow.on_batch_done, kwargs={"tag": "swept"}) as batch:
        ids = [h.id for h in flow.member.enqueue_many([(i,) for i in range(n)])]
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        for c, part in ((a, ids[: n // 2]), (b, ids[n // 2 :])):
            c.execute(FINISH, (part,))
            c.execute(FLUSH_NOW)
        a.commit()
        b.commit()
    state = app.get_batch(batch.id)
    assert (state.succeeded, state.callback_run_id) == (n, None)  # counted, not settled
    with WorkerProcess(dsn, APP, "--lease-seconds", "2"):  # rescues every second
        state = batch.wait(timeout=30)
        wait_until(lambda: callbacks(dsn, "swept"), timeout=30, message="the callback")
    assert state.callback_run_id is not None
    with psycopg.connect(dsn, autocommit=True) as c:  # a second sweep finds nothing to do
        assert c.execute(_sql.query("settle_open_batches"), {"limit": 10}).fetchall() == []
    assert callback_runs(dsn) == 1
    assert callbacks(dsn, "swept") == [f"swept:{batch.id}:{n}:{n}:0:0"]


def test_a_completed_batch_goes_once_its_members_and_callback_are_pruned(
    app: pgqueue.App, dsn: str
) -> None:
    with app.batch(on_complete=flow.on_batch_done, kwargs={"tag": "old"}) as old:
        flow.member.enqueue_many([(1,), (2,)])
    with app.batch(on_complete=flow.on_batch_done, kwargs={"tag": "new"}) as new:
        flow.member.enqueue(3)
    with WorkerProcess(dsn, APP, "--burst") as w:
        assert w.wait(60) == 0
    callback = old.wait(timeout=10).callback_run_id
    assert callback is not None and new.wait(timeout=10).callback_run_id is not None

    def age(where: str, *params: Any) -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(
                f"UPDATE pgqueue.runs SET finished_at = now() - interval '2 hours' WHERE {where}",
                params,
            )

    def batches() -> set[int]:
        with psycopg.connect(dsn) as c:
            return {r[0] for r in c.execute("SELECT id FROM pgqueue.batch_heads")}

    age("batch_id = %s", old.id)
    assert app.prune(3600)["batches"] == 0  # its callback run is still there
    assert batches() == {old.id, new.id}
    age("id = %s", callback)
    assert app.prune(3600)["batches"] == 1
    assert batches() == {new.id}  # its member and callback are recent: kept
    assert (
        scalar(dsn, "SELECT count(*) FROM pgqueue.batch_counts WHERE batch_id = %s", (old.id,)) == 0
    )
