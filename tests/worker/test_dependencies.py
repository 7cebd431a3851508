"""Dependencies between runs (task.options(after=...)) with real worker processes against a
real PostgreSQL: a run starts only once every run it names has finished, whichever worker
finishes them and whatever dies meanwhile; a failed dependency cancels its dependents, and
theirs, with a reason naming it; on_dependency_failure="run" runs them anyway.

Start times are checked twice: in the database (a run's started_at, taken by its claim, is
not before the finished_at of any of its dependencies, taken by their completion) and in
the task bodies' own log (tests/apps/deps.py: no execution of a run began before the end of
the body of each of its dependencies)."""

from __future__ import annotations

import contextlib
import itertools
import random
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.apps import deps
from tests.helpers import WorkerProcess, scalar, wait_until

pytestmark = pytest.mark.slow

APP = "tests.apps.deps:app"


class Fleet:
    """The worker processes of one test, killed at teardown; their output is printed (pytest
    shows it when the test failed)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.stack = contextlib.ExitStack()
        self.procs: list[WorkerProcess] = []

    def start(self, *args: str) -> WorkerProcess:
        proc = self.stack.enter_context(WorkerProcess(self.dsn, APP, "--lease-seconds", "2", *args))
        self.procs.append(proc)
        proc.wait_ready()
        return proc

    def close(self) -> None:
        for p in self.procs:
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait(10)
            with contextlib.suppress(ValueError, OSError):
                print(f"--- worker {p.pid} exited {p.proc.returncode} ---\n{p.output()}")
        self.stack.close()


@pytest.fixture
def fleet(dsn: str) -> Iterator[Fleet]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(deps.DDL)
    deps.app.configure(dsn=dsn)
    f = Fleet(dsn)
    try:
        yield f
    finally:
        f.close()
        deps.app.close()


def runs(dsn: str, ids: list[int]) -> dict[int, dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as c, c.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT id, state, attempt, after, started_at, finished_at, cancel_reason"
            " FROM pgqueue.runs WHERE id = ANY(%s)",
            (ids,),
        ).fetchall()
    return {r["id"]: r for r in rows}


def body_log(dsn: str) -> dict[int, list[dict[str, Any]]]:
    """Each run's executions (tests/apps/deps.py), by run id."""
    out: dict[int, list[dict[str, Any]]] = {}
    with psycopg.connect(dsn, autocommit=True) as c, c.cursor(row_factory=dict_row) as cur:
        for row in cur.execute("SELECT * FROM dep_log ORDER BY started").fetchall():
            out.setdefault(row["run_id"], []).append(row)
    return out


def wait_finished(dsn: str, ids: list[int], timeout: float) -> None:
    wait_until(
        lambda: (
            scalar(
                dsn,
                "SELECT count(*) FROM pgqueue.runs WHERE id = ANY(%s)"
                " AND state IN ('succeeded', 'failed', 'canceled')",
                (ids,),
            )
            == len(ids)
        ),
        timeout,
        message=f"{len(ids)} runs to finish",
    )


def assert_dependency_order(dsn: str, ids: list[int]) -> None:
    """Every run of `ids` that started did so after each of its dependencies finished: by
    the database's clock (started_at, finished_at), and by the bodies' (no execution of a
    run began before the body of a dependency ended)."""
    found = runs(dsn, ids)
    log = body_log(dsn)
    for run in found.values():
        for dep_id in run["after"] or []:
            dep = found.get(dep_id) or runs(dsn, [dep_id])[dep_id]
            assert dep["finished_at"] is not None, (run["id"], dep_id)
            if run["started_at"] is not None:
                assert run["started_at"] >= dep["finished_at"], (run, dep)
            if dep["state"] != "succeeded":
                continue
            # the end of the body of the attempt that succeeded (one whose lease was lost
            # may run on, fenced out, as a zombie)
            [ended] = [e["ended"] for e in log[dep_id] if e["attempt"] == dep["attempt"]]
            for execution in log.get(run["id"], []):
                assert execution["started"] >= ended, (execution, dep_id)


def test_diamonds_finish_in_dependency_order(fleet: Fleet, dsn: str) -> None:
    """Twenty diamonds (a -> b, c -> d) of runs of random lengths, on three workers: b and
    c start only after a ended, d only after both b and c ended."""
    for _ in range(3):
        fleet.start("--concurrency", "4")
    rng = random.Random(45)
    ids: list[int] = []
    diamonds = []
    for _ in range(20):
        a = deps.step.enqueue(rng.uniform(0, 0.3))
        b = deps.step.options(after=[a]).enqueue(rng.uniform(0, 0.3))
        c = deps.step.options(after=[a.id]).enqueue(rng.uniform(0, 0.3))
        d = deps.step.options(after=[b, c]).enqueue(0)
        diamonds.append((a.id, b.id, c.id, d.id))
        ids += [a.id, b.id, c.id, d.id]
    wait_finished(dsn, ids, timeout=60)
    found = runs(dsn, ids)
    assert {r["state"] for r in found.values()} == {"succeeded"}
    assert_dependency_order(dsn, ids)
    # the bodies ran on several workers
    pids = {e["pid"] for executions in body_log(dsn).values() for e in executions}
    assert len(pids) > 1


def test_a_chain_of_a_thousand_survives_a_sigkill(fleet: Fleet, dsn: str) -> None:
    """A chain of 1,000 runs, each after the one before, on three workers; the worker
    running link 500 (which takes 3 s) is killed with SIGKILL. Its run is rescued once its
    lease expires and run again, and the chain goes on: every link starts after the one
    before it ended, each link runs once but for attempts whose lease was lost (the killed
    one's)."""
    workers = [fleet.start() for _ in range(3)]
    killed_link = 500
    handles = [deps.step.enqueue()]
    with deps.app.connection() as c:  # one transaction: 1,000 enqueues, one commit
        for i in range(1, 1000):
            seconds = 3.0 if i == killed_link else 0.0
            handles.append(deps.step.options(after=[handles[-1]], conn=c).enqueue(seconds))
    ids = [h.id for h in handles]
    victim = ids[killed_link]
    wait_until(
        lambda: scalar(dsn, "SELECT count(*) FROM dep_log WHERE run_id = %s", (victim,)),
        timeout=120,
        message=f"link {killed_link} to start",
    )
    # nothing after it has started
    assert not scalar(
        dsn, "SELECT count(*) FROM dep_log WHERE run_id = ANY(%s)", (ids[killed_link + 1 :],)
    )
    pid = scalar(dsn, "SELECT pid FROM dep_log WHERE run_id = %s", (victim,))
    [doomed] = [w for w in workers if w.pid == pid]
    doomed.kill()
    fleet.start()  # three workers again
    wait_finished(dsn, ids, timeout=240)
    found = runs(dsn, ids)
    assert {r["state"] for r in found.values()} == {"succeeded"}
    assert found[victim]["attempt"] >= 2
    log = body_log(dsn)
    # each link ran once, but for an attempt whose lease was lost (the killed one; on a
    # machine loaded enough, any other): each such attempt is a lease_expired error
    with psycopg.connect(dsn) as c:
        lost = dict(
            c.execute(
                "SELECT run_id, count(*) FROM pgqueue.run_errors"
                " WHERE kind = 'lease_expired' GROUP BY run_id"
            ).fetchall()
        )
    assert lost.get(victim, 0) >= 1
    assert [len(log[i]) for i in ids] == [1 + lost.get(i, 0) for i in ids]
    assert_dependency_order(dsn, ids)
    # each link's first execution began after the previous link's successful body ended
    for before, after in itertools.pairwise(ids):
        [ended] = [e["ended"] for e in log[before] if e["attempt"] == found[before]["attempt"]]
        assert log[after][0]["started"] >= ended


def test_a_failed_dependency_cancels_its_dependents_and_run_runs_them(
    fleet: Fleet, dsn: str
) -> None:
    """a fails: b (after a) and c (after b) are canceled, the reasons naming the
    dependency; d (after a, on_dependency_failure="run") runs, and so does e (after c and
    d, "run") once both are finished; f (after d) runs after d."""
    fleet.start()
    fleet.start()
    a = deps.step.enqueue(0.5, fail=True)
    b = deps.step.options(after=[a]).enqueue()
    c = deps.step.options(after=[b]).enqueue()
    d = deps.step.options(after=[a], on_dependency_failure="run").enqueue(0.2)
    e = deps.step.options(after=[c, d], on_dependency_failure="run").enqueue()
    f = deps.step.options(after=[d]).enqueue()
    ids = [h.id for h in (a, b, c, d, e, f)]
    wait_finished(dsn, ids, timeout=60)
    found = runs(dsn, ids)
    assert [found[i]["state"] for i in ids] == [
        "failed",
        "canceled",
        "canceled",
        "succeeded",
        "succeeded",
        "succeeded",
    ]
    assert found[b.id]["cancel_reason"] == f"dependency #{a.id} failed"
    assert found[c.id]["cancel_reason"] == (
        f"dependency #{b.id} was canceled (dependency #{a.id} failed)"
    )
    log = body_log(dsn)
    assert b.id not in log and c.id not in log
    assert_dependency_order(dsn, ids)
    with pytest.raises(Exception, match="canceled"):
        c.wait(timeout=5)
    # enqueued after the failure: canceled at once, or queued at once with "run"
    late = deps.step.options(after=[a]).enqueue()
    anyway = deps.step.options(after=[a], on_dependency_failure="run").enqueue()
    assert runs(dsn, [late.id])[late.id]["state"] == "canceled"
    assert anyway.wait(timeout=30) == anyway.id
