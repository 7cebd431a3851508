"""Worker behaviour: retries, RetryAfter, NonRetryable, timeouts, cancel, hooks."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import time
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import sql as _sql
from pgqueue.worker._completer import complete_params
from pgqueue.worker.producer import Producer
from pgqueue.worker.records import Outcome
from tests.helpers import InProcessWorker, wait_until
from tests.worker.parts import FROM_FRONT

WORKER = "00000000-0000-0000-0000-000000000001"
FAST = pgqueue.RetryPolicy(base=0.05, jitter=0)


def burst(app: pgqueue.App, **options: Any) -> Any:
    w = app.worker(install_signal_handlers=False, **options)
    w.run(burst=True)
    return w


def test_failures_retry_with_backoff_then_fail(app: pgqueue.App) -> None:
    calls: list[int] = []

    @app.task(max_attempts=3, retry=FAST)
    def flaky() -> None:
        calls.append(1)
        raise ConnectionError("upstream down")

    h = flaky.enqueue()
    with (
        InProcessWorker(app, stage_interval=0.05),
        pytest.raises(pgqueue.RunFailed, match="upstream down"),
    ):
        h.wait(timeout=10)
    run = app.get_run(h.id)
    assert (run.state, run.attempt, len(calls)) == ("failed", 3, 3)
    errors = app.run_errors(h.id)
    assert [e["attempt"] for e in errors] == [1, 2, 3]
    assert all(e["kind"] == "error" and "ConnectionError" in e["traceback"] for e in errors)


def test_success_after_a_retry(app: pgqueue.App) -> None:
    calls: list[int] = []

    @app.task(retry=FAST)
    def second_time_lucky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first")
        return "ok"

    h = second_time_lucky.enqueue()
    with InProcessWorker(app, stage_interval=0.05):
        assert h.wait(timeout=10) == "ok"
    assert app.get_run(h.id).attempt == 2


def test_retry_after_does_not_use_an_attempt(app: pgqueue.App) -> None:
    calls: list[float] = []

    @app.task(max_attempts=1)
    def rate_limited() -> str:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise pgqueue.RetryAfter(0.2)
        return "through"

    h = rate_limited.enqueue()
    with InProcessWorker(app, stage_interval=0.05):
        assert h.wait(timeout=10) == "through"
    assert app.get_run(h.id).attempt == 1
    assert calls[1] - calls[0] >= 0.2


def test_non_retryable_fails_at_once(app: pgqueue.App) -> None:
    @app.task(max_attempts=5)
    def bad() -> None:
        raise pgqueue.NonRetryable("card declined")

    h = bad.enqueue()
    burst(app)
    run = app.get_run(h.id)
    assert (run.state, run.attempt) == ("failed", 1)
    assert "card declined" in (run.error or "")


def test_async_task_timeout_is_cancelled_for_real(app: pgqueue.App) -> None:
    cancelled = threading.Event()

    @app.task(timeout=0.2, max_attempts=1)
    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    h = slow.enqueue()
    started = time.monotonic()
    burst(app)
    assert time.monotonic() - started < 5
    run = app.get_run(h.id)
    assert run.state == "failed" and "timeout" in (run.error or "")
    assert cancelled.is_set()
    assert app.run_errors(h.id)[0]["kind"] == "timeout"


def test_sync_task_timeout_flags_ctx_cancelled(app: pgqueue.App) -> None:
    saw_cancel = threading.Event()

    @app.workflow(timeout=0.2, max_attempts=1)
    def slow(ctx: pgqueue.Context) -> None:
        if ctx.wait_cancelled(10):
            saw_cancel.set()

    h = slow.enqueue()
    burst(app)
    assert app.get_run(h.id).state == "failed"
    assert saw_cancel.is_set()


def test_sync_task_timeout_keeps_its_slot_until_the_function_returns(app: pgqueue.App) -> None:
    """A sync attempt past its timeout is failed at once, while its thread runs on; its
    slot stays busy until the function returns (a thread cannot be stopped)."""
    release, second = threading.Event(), threading.Event()

    @app.task(timeout=0.2, max_attempts=1)
    def stuck() -> None:
        release.wait(30)

    @app.task
    def after() -> None:
        second.set()

    h = stuck.enqueue()
    with InProcessWorker(app, concurrency=1) as w:
        wait_until(lambda: app.get_run(h.id).state == "failed", message="the timeout's failure")
        assert "timeout" in (app.get_run(h.id).error or "")
        h2 = after.enqueue()
        assert len(w.executor.held) == 1  # the stuck attempt's slot: nothing else can be claimed
        assert app.get_run(h2.id).state == "queued"
        release.set()
        assert second.wait(10), "the slot did not come back when the function returned"
        wait_until(lambda: app.get_run(h2.id).state == "succeeded", message="second run")
    assert app.get_run(h.id).state == "failed"  # the late return changed nothing


def test_sync_task_that_exits_fails_its_run_not_the_worker(app: pgqueue.App) -> None:
    @app.task(max_attempts=1)
    def exits() -> None:
        raise SystemExit(3)

    @app.task
    def fine() -> str:
        return "ok"

    bad, good = exits.enqueue(), fine.enqueue()
    burst(app)
    run = app.get_run(bad.id)
    assert run.state == "failed" and "SystemExit" in (run.error or "")
    assert app.get_run(good.id).result == "ok"


def test_stop_waits_for_a_running_sync_task_within_grace(app: pgqueue.App) -> None:
    started, go = threading.Event(), threading.Event()

    @app.task
    def slow() -> str:
        started.set()
        go.wait(10)
        return "done"

    h = slow.enqueue()
    with InProcessWorker(app, grace=30) as w:
        assert started.wait(10)
        w.stop()
        wait_until(lambda: w.executor.threads_quiet is not None, message="the worker to drain")
        go.set()
    assert w.stats["released"] == 0
    assert app.get_run(h.id).result == "done"


def test_sync_run_past_grace_is_released_and_its_late_return_dropped(app: pgqueue.App) -> None:
    started, go, returned = threading.Event(), threading.Event(), threading.Event()

    @app.task
    def slow() -> str:
        started.set()
        go.wait(10)
        returned.set()
        return "late"

    h = slow.enqueue()
    with InProcessWorker(app, grace=0.2) as w:
        assert started.wait(10)
    assert w.stats["released"] == 1
    go.set()
    assert returned.wait(10)
    run = app.get_run(h.id)
    assert (run.state, run.attempt, run.result) == ("queued", 0, None)


def test_stop_does_not_wait_for_the_thread_of_a_lost_attempt(app: pgqueue.App) -> None:
    """A canceled (or rescued) run's thread may run on, stuck in task code that ignores
    ctx.cancelled: a draining worker owes that run nothing and stops without waiting
    out its grace period for the thread."""
    started, go = threading.Event(), threading.Event()

    @app.task
    def ignores_cancel() -> None:
        started.set()
        go.wait(60)

    h = ignores_cancel.enqueue()
    runner = InProcessWorker(app, grace=60)
    try:
        w = runner.__enter__()
        assert started.wait(10)
        assert app.cancel(h.id)
        wait_until(lambda: w.stats["lost"] == 1, message="the worker to drop the run")
        w.stop()
        runner.thread.join(20)
        assert not runner.thread.is_alive(), "the worker waited for a lost attempt's thread"
    finally:
        go.set()
        runner.thread.join(30)
    assert app.get_run(h.id).state == "canceled"


def sleeps_until_cancelled(app: pgqueue.App) -> tuple[Any, threading.Event, threading.Event]:
    """An async task that sleeps a minute; events: it started, it was cancelled."""
    started = threading.Event()
    stopped = threading.Event()

    @app.task
    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise

    return forever, started, stopped


def test_cancel_a_running_run_stops_it(app: pgqueue.App) -> None:
    forever, started, stopped = sleeps_until_cancelled(app)
    h = forever.enqueue()
    with InProcessWorker(app) as w:
        assert started.wait(10)
        assert app.cancel(h.id)
        assert stopped.wait(5), "the async task was not cancelled"
        wait_until(lambda: not w.executor.held, message="worker to drop the canceled run")
    assert app.get_run(h.id).state == "canceled"


def test_async_run_past_grace_is_cancelled_and_released(app: pgqueue.App) -> None:
    """Stopping past the grace period cancels a running async task for real and gives
    its run back (queued, attempt refunded); the worker's own task is not left cancelled
    and still writes the release."""
    forever, started, stopped = sleeps_until_cancelled(app)
    h = forever.enqueue()
    with InProcessWorker(app, grace=0.2) as w:
        assert started.wait(10)
    assert stopped.is_set()
    assert w.stats["released"] == 1
    run = app.get_run(h.id)
    assert (run.state, run.attempt, run.worker_id) == ("queued", 0, None)


def test_async_task_that_finishes_without_suspending(app: pgqueue.App) -> None:
    """A coroutine that never awaits finishes in the worker's own task; many at once."""

    @app.task(timeout=5)
    async def double(n: int) -> int:
        return 2 * n

    @app.task
    async def boom() -> None:
        raise ValueError("nope")

    handles = double.enqueue_many([(i,) for i in range(50)])
    bad = boom.options(max_attempts=1).enqueue()
    burst(app, concurrency=20)
    assert [app.get_run(h.id).result for h in handles] == [2 * i for i in range(50)]
    assert app.get_run(bad.id).state == "failed"


def test_each_async_body_runs_in_its_own_asyncio_task(app: pgqueue.App) -> None:
    """Whatever the interpreter (on 3.12+ an attempt's task starts eagerly, its first
    step inside Producer._claim), an async body's code runs in its own asyncio task from
    its first line: asyncio.current_task() is its own, a ContextVar it sets is seen by no
    other run, and an asyncio.timeout it opens before its first await cancels only it."""
    var: contextvars.ContextVar[int | None] = contextvars.ContextVar("var", default=None)
    seen: dict[int, tuple[int | None, int | None, asyncio.Task[Any] | None, bool]] = {}

    @app.task
    async def own(i: int) -> str:
        before = var.get()
        var.set(i)
        me = asyncio.current_task()
        try:
            async with asyncio.timeout(0.05 if i == 0 else 5):
                await asyncio.sleep(0.5 if i == 0 else 0)
            outcome = "slept"
        except TimeoutError:
            outcome = "timed out"
        seen[i] = (before, var.get(), me, me is asyncio.current_task())
        return outcome

    handles = own.enqueue_many([(i,) for i in range(20)])
    w = burst(app, concurrency=20)
    assert [app.get_run(h.id).result for h in handles] == ["timed out"] + ["slept"] * 19
    assert w.stats["succeeded"] == 20
    assert all(seen[i][:2] == (None, i) and seen[i][3] for i in range(20))
    tasks = [seen[i][2] for i in range(20)]  # kept alive here: identities cannot repeat
    assert len({id(t) for t in tasks}) == 20
    assert all(t is not None and t.get_coro().__qualname__ == "Executor.execute" for t in tasks)


def test_unknown_task_fails_without_blocking_the_queue(app: pgqueue.App) -> None:
    @app.task
    def known() -> str:
        return "fine"

    ghost = app.enqueue_by_name("not.deployed", max_attempts=1)
    ok = known.enqueue()
    burst(app)
    run = app.get_run(ghost.id)
    assert run.state == "failed" and "not.deployed" in (run.error or "")
    assert app.get_run(ok.id).state == "succeeded"


def test_invalid_arguments_at_run_time_are_not_retried(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    @app.task(max_attempts=5)
    def takes_one(n: int) -> None: ...

    run_id = conn.execute("SELECT pgqueue.enqueue(%s, '[1, 2, 3]')", (takes_one.name,)).fetchone()[
        0
    ]  # type: ignore[index]
    burst(app)
    run = app.get_run(run_id)
    assert (run.state, run.attempt) == ("failed", 1)
    assert app.run_errors(run_id)[0]["kind"] == "invalid_arguments"


def test_non_json_result_fails_cleanly(app: pgqueue.App) -> None:
    @app.task(max_attempts=3)
    def returns_object() -> object:
        return object()

    h = returns_object.enqueue()
    burst(app)
    run = app.get_run(h.id)
    assert (run.state, run.attempt) == ("failed", 1)
    assert "must be JSON" in (run.error or "")


def test_result_postgres_cannot_store_fails_cleanly(app: pgqueue.App) -> None:
    """A NUL character is JSON but not jsonb: the run fails with a clear error instead of
    failing the completion batch it is written in."""

    @app.task(max_attempts=3)
    def returns_nul(s: str) -> str:
        return s + "\x00" if s == "a" else s

    bad, good = returns_nul.enqueue("a"), returns_nul.enqueue_many([("b",)])[0]
    burst(app)
    run = app.get_run(bad.id)
    assert (run.state, run.attempt) == ("failed", 1)
    assert "NUL character" in (run.error or "")
    assert (app.get_run(good.id).state, app.get_run(good.id).result) == ("succeeded", "b")


def test_hooks_run_once_and_cannot_change_the_outcome(app: pgqueue.App) -> None:
    seen: list[tuple[str, Any]] = []

    def ok_hook(ctx: pgqueue.Context, result: Any) -> None:
        seen.append(("success", result))
        raise RuntimeError("hook bug")

    def fail_hook(ctx: pgqueue.Context, error: Any) -> None:
        seen.append(("failure", ctx.run_id))

    @app.task(on_success=ok_hook)
    def good() -> int:
        return 7

    @app.task(on_failure=fail_hook, max_attempts=2, retry=FAST)
    def bad() -> None:
        raise ValueError("nope")

    g, b = good.enqueue(), bad.enqueue()
    with InProcessWorker(app, stage_interval=0.05):
        assert g.wait(timeout=10) == 7
        with pytest.raises(pgqueue.RunFailed):
            b.wait(timeout=10)
        wait_until(lambda: len(seen) == 2, message="both hooks")
    assert sorted(seen, key=str) == sorted([("success", 7), ("failure", b.id)], key=str)
    assert app.get_run(g.id).state == "succeeded"


def test_a_timed_out_attempt_is_retried_and_the_retry_succeeds(app: pgqueue.App) -> None:
    """timeout -> retry -> success, for a sync task (its thread told to stop through
    ctx.cancelled, its late return dropped) and an async one (cancelled for real)."""
    late: list[str] = []

    @app.task(timeout=0.3, max_attempts=3, retry=FAST)
    def sync_slow_once() -> str:
        ctx = pgqueue.current()
        if ctx.attempt == 1:
            ctx.wait_cancelled(10)
            late.append("returned")
            return "late"
        return "sync ok"

    @app.task(timeout=0.3, max_attempts=3, retry=FAST)
    async def async_slow_once() -> str:
        if pgqueue.current().attempt == 1:
            await asyncio.sleep(30)
        return "async ok"

    s, a = sync_slow_once.enqueue(), async_slow_once.enqueue()
    with InProcessWorker(app, stage_interval=0.05):
        assert s.wait(timeout=10) == "sync ok"
        assert a.wait(timeout=10) == "async ok"
        # the first attempt's thread was told to stop, and did; what it returned was dropped
        wait_until(lambda: late == ["returned"], message="the timed-out thread's return")
    for h in (s, a):
        run = app.get_run(h.id)
        assert (run.state, run.attempt) == ("succeeded", 2)
        errors = app.run_errors(h.id)
        assert [(e["attempt"], e["kind"]) for e in errors] == [(1, "timeout")]
        assert "timeout of 0.3s" in errors[0]["message"]


def test_an_on_success_hook_runs_once_after_the_success_is_written(app: pgqueue.App) -> None:
    seen: list[tuple[str, int, Any, str, bool]] = []

    def sync_hook(ctx: pgqueue.Context, result: Any) -> None:
        state = app.get_run(ctx.run_id).state
        seen.append(("sync", ctx.run_id, result, state, pgqueue.current() is ctx))

    async def async_hook(ctx: pgqueue.Context, result: Any) -> None:
        state = (await asyncio.to_thread(app.get_run, ctx.run_id)).state
        seen.append(("async", ctx.run_id, result, state, pgqueue.current() is ctx))

    @app.task(on_success=sync_hook)
    def plain(n: int) -> dict[str, int]:
        return {"n": n}

    @app.workflow(on_success=async_hook)
    def flow(ctx: pgqueue.Context, n: int) -> list[int]:
        return [ctx.step("double", lambda: n * 2)]

    p, f = plain.enqueue(3), flow.enqueue(4)
    with InProcessWorker(app, stage_interval=0.05):
        assert p.wait(timeout=10) == {"n": 3}
        assert f.wait(timeout=10) == [8]
        wait_until(lambda: len(seen) == 2, message="both hooks")
    assert sorted(seen) == [
        ("async", f.id, [8], "succeeded", True),
        ("sync", p.id, {"n": 3}, "succeeded", True),
    ]


def test_priority_lower_runs_first(app: pgqueue.App) -> None:
    order: list[int] = []

    @app.task
    def note(n: int) -> None:
        order.append(n)

    note.enqueue_many([(i,) for i in range(5)])
    note.options(priority=-10).enqueue(99)
    burst(app, concurrency=1)
    assert order[0] == 99 and order[1:] == [0, 1, 2, 3, 4]


def test_paused_queue_is_not_claimed(app: pgqueue.App) -> None:
    @app.task
    def t() -> None: ...

    h = t.enqueue()
    app.set_paused("default", True)
    burst(app)
    assert app.get_run(h.id).state == "queued"
    app.set_paused("default", False)
    burst(app)
    assert app.get_run(h.id).state == "succeeded"


def test_stale_lease_cannot_write(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    """Fencing: a completion carrying an expired or foreign lease token changes nothing."""

    @app.task
    def t() -> None: ...

    h = t.enqueue()
    row = conn.execute(
        _sql.query("claim"),
        {
            "queue": "default",
            "limit": 1,
            "worker_id": WORKER,
            "lease_seconds": 30,
            **FROM_FRONT,
        },
    ).fetchone()
    assert row is not None
    token = row[8]
    conn.execute("UPDATE pgqueue.runs SET lease_expires_at = now() - interval '1s'")
    outcome = Outcome(h.id, token, "succeeded", result="1")
    params = complete_params([outcome], WORKER)
    assert conn.execute(_sql.query("complete"), params).fetchall() == []
    renewed = conn.execute(
        _sql.query("renew_leases"),
        {
            "worker_id": WORKER,
            "lease_seconds": 30,
            "id": [h.id],
            "lease_token": [token],
            "running": None,
        },
    ).fetchall()
    assert renewed == []
    assert app.get_run(h.id).state == "running"


def test_burst_drains_a_limited_queue(app: pgqueue.App) -> None:
    """Burst must not stop while permits are about to come back (outcomes in flight)."""
    app.queue("tight", concurrency=2)

    @app.task(queue="tight")
    def t(n: int) -> int:
        return n

    handles = t.enqueue_many([(i,) for i in range(40)])
    burst(app, concurrency=8)
    assert {app.get_run(h.id).state for h in handles} == {"succeeded"}


def test_completion_document_round_trip(app: pgqueue.App, conn: psycopg.Connection[Any]) -> None:
    """Every kind of outcome survives the one-jsonb-document encoding of complete.sql."""
    import datetime as dt
    import math

    @app.task
    def t() -> None: ...

    ids = [h.id for h in t.enqueue_many([() for _ in range(8)])]
    params = {
        "queue": "default",
        "limit": 10,
        "worker_id": WORKER,
        "lease_seconds": 30,
        **FROM_FRONT,
    }
    tokens = {r[0]: r[8] for r in conn.execute(_sql.query("claim"), params).fetchall()}
    since = dt.datetime(2030, 1, 2, 3, 4, 5, 600000, tzinfo=dt.UTC)
    a, b, c, d, e, f, g, h = ids
    outcomes = [
        Outcome(a, tokens[a], "succeeded", result="null"),
        Outcome(b, tokens[b], "succeeded"),
        Outcome(c, tokens[c], "succeeded", result='{"k":[1,"\\u00e9\\n\\"x"]}'),
        Outcome(
            d, tokens[d], "failed", error="bad \x00 \udc80 é", error_kind="error", traceback="tb"
        ),
        Outcome(e, tokens[e], "scheduled", error="E: x", error_kind="error", delay=60.0),
        Outcome(f, tokens[f], "queued", refund=True),
        Outcome(
            g, tokens[g], "waiting", delay=None, refund=True, wait_event="ev", wait_key="k",
            wait_since=since,
        ),
        Outcome(h, tokens[h], "scheduled", delay=math.inf, refund=True),
    ]  # fmt: skip
    written = conn.execute(_sql.query("complete"), complete_params(outcomes, WORKER)).fetchall()
    assert sorted(r[0] for r in written) == sorted(ids)
    rows = {
        r[0]: r[1:]
        for r in conn.execute(
            """SELECT id, state, result IS NULL, result, error, attempt,
                      least(extract(epoch FROM run_at - now()), 1e9)::int,
                      run_at = '9999-12-31 00:00:00+00',
                      wait_event, wait_key, wait_since, lease_token IS NULL
                 FROM pgqueue.runs WHERE id = ANY(%s)""",
            (ids,),
        ).fetchall()
    }
    assert rows[a][:3] == ("succeeded", False, None)  # JSON null, not SQL NULL
    assert rows[b][:2] == ("succeeded", True)
    assert rows[c][2] == {"k": [1, 'é\n"x']}
    assert rows[d][0] == "failed" and rows[d][3] == "bad \\x00 ? é"
    assert rows[e][0] == "scheduled" and rows[e][4] == 1 and 58 <= rows[e][5] <= 60
    assert rows[f][0] == "queued" and rows[f][4] == 0
    assert rows[g][0] == "waiting" and rows[g][4] == 0 and rows[g][6]
    assert rows[g][7:10] == ("ev", "k", since)
    assert rows[h][0] == "scheduled" and rows[h][6]  # an infinite delay: no deadline
    assert all(r[-1] for r in rows.values())  # every lease handed back
    errors = conn.execute(
        "SELECT run_id, kind, message, traceback FROM pgqueue.run_errors ORDER BY run_id"
    ).fetchall()
    assert errors == [(d, "error", "bad \\x00 ? é", "tb"), (e, "error", "E: x", None)]


def test_plain_successes_are_fenced_by_their_own_tokens(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """complete.sql's hot path (plain successes: ids and a token per id) writes a run only
    with the token of its own claim, not with that of another claim in the batch. One
    claim hands all its runs one token: a lease is a run's id and its claim's token."""

    @app.task
    def t() -> None: ...

    ids = [h.id for h in t.enqueue_many([() for _ in range(4)])]
    params = {"queue": "default", "limit": 1, "worker_id": WORKER, "lease_seconds": 30}
    tokens = {}
    for limit in (1, 1, 2):  # three claims: a, b, then c and d together
        for r in conn.execute(_sql.query("claim"), params | FROM_FRONT | {"limit": limit}):
            tokens[r[0]] = r[8]
    a, b, c, d = ids
    assert len({tokens[a], tokens[b], tokens[c]}) == 3 and tokens[c] == tokens[d]
    swapped = [
        Outcome(a, tokens[b], "succeeded", result="1"),
        Outcome(b, tokens[a], "succeeded", result="2"),
        Outcome(c, tokens[c], "succeeded", result='{"ok": [1, null]}'),
        Outcome(d, tokens[d], "succeeded", result="null"),
    ]
    sent = complete_params(swapped, WORKER)
    assert sent["succeeded"] == f"{{{a},{b},{c},{d}}}" and sent["outcomes"] == "[]"
    written = conn.execute(_sql.query("complete"), sent).fetchall()
    assert sorted(r[0] for r in written) == [c, d]
    states = dict(conn.execute("SELECT id, state FROM pgqueue.runs").fetchall())
    assert states == {a: "running", b: "running", c: "succeeded", d: "succeeded"}
    assert app.get_run(c).result == {"ok": [1, None]}
    assert app.get_run(d).result is None  # JSON null


def test_claims_commit_asynchronously_outcomes_do_not(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """A claim of a queue without limits does not wait for its WAL flush (the outcome's
    commit, which does, flushes it too); the setting is local to the claim's transaction.
    Limited claims and outcomes stay synchronous (see sql/claim_limited.sql why)."""
    conn.execute("INSERT INTO pgqueue.queues (name, concurrency) VALUES ('tight', 2)")

    @app.task
    def t() -> None: ...

    @app.task(queue="tight")
    def limited() -> None: ...

    h = t.enqueue()
    limited.enqueue()
    setting = "SELECT current_setting('synchronous_commit')"
    claim = {"limit": 1, "worker_id": WORKER, "lease_seconds": 30, "finishing": [], **FROM_FRONT}
    tokens = {}
    for query, queue, inside in [("claim", "default", "off"), ("claim_limited", "tight", "on")]:
        with conn.transaction():
            rows = conn.execute(_sql.query(query), {**claim, "queue": queue}).fetchall()
            assert len(rows) == 1, query
            tokens[queue] = rows[0][8]
            assert conn.execute(setting).fetchone() == (inside,), query
        assert conn.execute(setting).fetchone() == ("on",), query
    with conn.transaction():
        outcome = Outcome(h.id, tokens["default"], "succeeded")
        written = conn.execute(_sql.query("complete"), complete_params([outcome], WORKER))
        assert [r[0] for r in written.fetchall()] == [h.id]
        assert conn.execute(setting).fetchone() == ("on",)


def test_a_running_step_commits_asynchronously_its_outcome_does_not(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """The `running` row of a workflow step is only for looking at: its commit does not
    wait for its WAL flush; the step's outcome (which flushes both) does."""

    @app.task
    def t() -> None: ...

    h = t.enqueue()
    claim = {"limit": 1, "worker_id": WORKER, "lease_seconds": 30, "finishing": [], **FROM_FRONT}
    token = conn.execute(_sql.query("claim"), {**claim, "queue": "default"}).fetchone()[8]
    setting = "SELECT current_setting('synchronous_commit')"
    step = {"run_id": h.id, "lease_token": token, "name": "s", "output": None, "error": None,
            "attempt": 1, "started_at": None, "waited": None, "position": 0,
            "call": "f"}  # fmt: skip
    for state, output, inside in [("running", None, "off"), ("succeeded", "1", "on")]:
        with conn.transaction():
            row = conn.execute(
                _sql.query("record_step"), {**step, "state": state, "output": output}
            ).fetchone()
            assert row is not None and row[0] == "s", state
            assert conn.execute(setting).fetchone() == (inside,), state
        assert conn.execute(setting).fetchone() == ("on",), state
    assert conn.execute(
        "SELECT state FROM pgqueue.steps WHERE run_id = %s", (h.id,)
    ).fetchone() == ("succeeded",)


def test_two_claims_in_flight_stay_within_the_concurrency(
    app: pgqueue.App, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running worker keeps a second claim on its way while the first one's runs start;
    the runs it holds plus the slots its claims asked for never exceed its concurrency."""
    running = peak_running = 0

    @app.task
    async def hold(n: int) -> None:
        nonlocal running, peak_running
        running += 1
        peak_running = max(peak_running, running)
        await asyncio.sleep(0.002)
        running -= 1

    hold.enqueue_many([(i,) for i in range(1000)])
    in_process = InProcessWorker(app, concurrency=100)
    worker = in_process.worker
    taken: list[int] = []  # slots held or asked for, as each claim starts
    asked: list[int] = []  # slots asked for by the claims on their way, then
    claim = Producer._claim  # the worker's producer is built once it runs

    async def spy(producer: Producer, queue: str, limit: int) -> int:
        taken.append(len(producer.executor.held) + producer.reserved)
        asked.append(producer.reserved)
        return await claim(producer, queue, limit)

    monkeypatch.setattr(Producer, "_claim", spy)
    with in_process:
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM pgqueue.runs WHERE state = 'succeeded'"
                ).fetchone()[0]  # type: ignore[index]
                == 1000
            ),
            message="1,000 runs to succeed",
        )
    assert max(taken) <= 100
    assert peak_running <= 100
    # two claims were on their way at once (their asks add up past one batch)
    assert max(asked) > worker.producer.claim_batch, asked[:20]


def test_burst_returns_once_every_outcome_is_written(
    app: pgqueue.App, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs without hooks end their asyncio task when their outcome is handed in; the
    completer settles them later. A burst still ends only when all are written, however
    slow the writes."""
    from pgqueue.worker._completer import Completer

    write = Completer._write

    async def slow_write(self: Completer, outcomes: list[Outcome]) -> set[int]:
        await asyncio.sleep(0.1)
        return await write(self, outcomes)

    monkeypatch.setattr(Completer, "_write", slow_write)

    @app.task
    async def quick(n: int) -> int:
        return n

    quick.enqueue_many([(i,) for i in range(300)])
    worker = burst(app, concurrency=50)
    assert worker.stats["succeeded"] == 300
    assert worker.completer.unwritten == 0
    states = dict(conn.execute("SELECT state, count(*) FROM pgqueue.runs GROUP BY 1").fetchall())
    assert states == {"succeeded": 300}


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "{}",
        "[1, 2.5, -3e10, true, false, null]",
        '{"a": [1, {"b": "c\\u00e9\\n"}], "": 0}',
        '"just a string"',
        "12",
        "[1] ",  # not as jsonb prints, still JSON
    ],
)
def test_the_workers_json_loader_agrees_with_json_loads(text: str) -> None:
    """The worker's jsonb loader (args, kwargs) takes shortcuts; it must read what
    json.loads reads, from str and from bytes."""
    from pgqueue.worker.connection import loads_json

    assert loads_json(text) == json.loads(text)
    assert loads_json(text.encode()) == json.loads(text)


@pytest.mark.parametrize("text", ["", "[1", "[1] x", "nope"])
def test_the_workers_json_loader_rejects_what_json_loads_rejects(text: str) -> None:
    """Without raising: psycopg decodes a whole claim at once (see Undecodable)."""
    from pgqueue.worker.connection import Undecodable, loads_json

    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    refused = loads_json(text.encode())
    assert isinstance(refused, Undecodable)
    assert refused.why == f"not JSON ({expected.value})"
