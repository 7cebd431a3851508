"""`pgqueue worker --processes N`: sync tasks' code in child processes, with hard time
limits, recycling, cancel, and children that never outlive their worker."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

import pgqueue
from pgqueue.cli import main
from pgqueue.errors import ConfigError, RunFailed
from pgqueue.worker import Worker
from tests.apps.procs import app as procs_app
from tests.apps.procs import (
    exits,
    fails,
    hog,
    hooked,
    leak,
    limited_hog,
    limited_pid,
    logs,
    parent_pid,
    pid,
    polite,
    spin,
)
from tests.helpers import WorkerProcess, scalar, wait_until

APP = "tests.apps.procs:app"


@pytest.fixture
def procs(dsn: str) -> Iterator[pgqueue.App]:
    """The tasks' app on this test's database (closed after: its waiters' connection)."""
    procs_app.configure(dsn=dsn)
    yield procs_app
    procs_app.close()


def alive(process_id: int) -> bool:
    """Whether a process of that id runs (a zombie, exited but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{process_id}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def child_of(dsn: str, run_id: int) -> int:
    """The pid a running procs.spin / procs.hog run reported (its child's)."""
    query = "SELECT progress->>'message' FROM pgqueue.runs WHERE id = %s"
    found = wait_until(lambda: scalar(dsn, query, (run_id,)), 30, message=f"run {run_id}'s pid")
    return int(found)


def test_sync_tasks_run_in_children_async_ones_in_the_worker(dsn: str, procs: pgqueue.App) -> None:
    with WorkerProcess(dsn, APP, "--processes", "2") as worker:
        worker.wait_ready()
        pids = {pid.enqueue().wait(timeout=30) for _ in range(4)}
        assert worker.pid not in pids and all(isinstance(p, int) for p in pids)
        assert len(pids) <= 2
        assert parent_pid.enqueue().wait(timeout=30) == worker.pid
        assert hooked.enqueue().wait(timeout=30) != worker.pid
        # its hook ran in the worker, after the child's attempt was written
        query = "SELECT args FROM pgqueue.runs WHERE task = 'procs.noted'"
        assert wait_until(lambda: scalar(dsn, query), 30, message="the hook") == [worker.pid]
        with pytest.raises(RunFailed, match="no good"):
            fails.enqueue().wait(timeout=30)


def test_a_child_past_timeout_and_grace_is_killed_and_replaced(
    dsn: str, procs: pgqueue.App
) -> None:
    with WorkerProcess(dsn, APP, "--processes", "1", "--grace", "1") as worker:
        worker.wait_ready()
        h = hog.enqueue()
        child = child_of(dsn, h.id)
        assert child != worker.pid
        with pytest.raises(RunFailed, match="timeout of 1s"):
            h.wait(timeout=30)
        wait_until(lambda: not alive(child), 15, message=f"child {child} to be killed")
        assert pid.enqueue().wait(timeout=30) not in (child, worker.pid)
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        log = worker.output()
    assert f"killing child process {child}" in log, log


def test_a_killed_childs_permit_is_held_until_it_is_gone(dsn: str, procs: pgqueue.App) -> None:
    """Queue `limited` runs one at a time: after the hog's timeout its child runs on for
    the grace period, and the queue's next run starts only once it is killed."""
    with WorkerProcess(dsn, APP, "--processes", "2", "--grace", "3") as worker:
        worker.wait_ready()
        h = limited_hog.enqueue()
        child_of(dsn, h.id)
        after = limited_pid.enqueue()
        assert after.wait(timeout=30) != worker.pid
        gap = scalar(
            dsn,
            "SELECT extract(epoch FROM b.started_at - a.finished_at) FROM pgqueue.runs a,"
            " pgqueue.runs b WHERE a.id = %s AND b.id = %s",
            (h.id, after.id),
        )
        assert procs.get_run(h.id).state == "failed"
    assert gap >= 2.5, gap


def test_max_runs_recycles_each_child(dsn: str, procs: pgqueue.App) -> None:
    with WorkerProcess(dsn, APP, "--processes", "1", "--max-runs", "2") as worker:
        worker.wait_ready()
        pids = [pid.enqueue().wait(timeout=30) for _ in range(6)]
        assert worker.proc.poll() is None  # the worker goes on; its children are replaced
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        log = worker.output()
    assert "exited with code" not in log, log
    assert log.count("recycled: 2 runs (max_runs)") >= 2, log
    assert pids[0] == pids[1] and pids[2] == pids[3] and pids[4] == pids[5], pids
    assert len(set(pids)) == 3, pids


def test_a_childs_log_lines_carry_the_run_in_the_workers_format(
    dsn: str, procs: pgqueue.App
) -> None:
    with WorkerProcess(dsn, APP, "--processes", "1", "--log-format", "json") as worker:
        worker.wait_ready()
        h = logs.enqueue()
        h.wait(timeout=30)
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        lines = [json.loads(x) for x in worker.output().splitlines() if x.startswith("{")]
    found = [line for line in lines if line["message"] == "a line from a child"]
    assert len(found) == 1 and found[0]["pgqueue_run_id"] == h.id, lines


def test_max_memory_recycles_a_child_over_it(dsn: str, procs: pgqueue.App) -> None:
    with WorkerProcess(dsn, APP, "--processes", "1", "--max-memory", "150") as worker:
        worker.wait_ready()
        small = leak.enqueue(1).wait(timeout=30)
        big = leak.enqueue(200).wait(timeout=30)
        after = leak.enqueue(1).wait(timeout=30)
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        log = worker.output()
    assert small == big != after, (small, big, after, log)
    assert "over max_memory_mb 150" in log, log


def test_cancel_stops_the_child_and_the_run_is_canceled(dsn: str, procs: pgqueue.App) -> None:
    with WorkerProcess(dsn, APP, "--processes", "1", "--grace", "1") as worker:
        worker.wait_ready()
        h = spin.enqueue(3600)
        child = child_of(dsn, h.id)
        procs.cancel(h.id)
        wait_until(lambda: not alive(child), 15, message=f"child {child} to be killed")
        assert procs.get_run(h.id).state == "canceled"
        assert pid.enqueue().wait(timeout=30) not in (child, worker.pid)


def test_a_child_that_exits_under_a_run_fails_it_and_is_replaced(
    dsn: str, procs: pgqueue.App
) -> None:
    with WorkerProcess(dsn, APP, "--processes", "1") as worker:
        worker.wait_ready()
        before = pid.enqueue().wait(timeout=30)
        with pytest.raises(RunFailed, match="exited with code 3"):
            exits.enqueue(3).wait(timeout=30)
        after = pid.enqueue().wait(timeout=30)
    assert before != after and worker.pid not in (before, after)


def test_a_child_whose_code_heeds_the_cancel_is_kept(dsn: str, procs: pgqueue.App) -> None:
    """ctx.cancelled reaches the child: code that returns on it ends the attempt (the
    run is canceled), and the same child takes the next run."""
    with WorkerProcess(dsn, APP, "--processes", "1", "--grace", "30") as worker:
        worker.wait_ready()
        h = polite.enqueue()
        child = child_of(dsn, h.id)
        procs.cancel(h.id)
        assert pid.enqueue().wait(timeout=20) == child
        assert procs.get_run(h.id).state == "canceled"
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        log = worker.output()
    assert "killing child" not in log, log


def test_children_die_with_a_killed_worker_whose_runs_are_rescued(
    dsn: str, procs: pgqueue.App
) -> None:
    with WorkerProcess(dsn, APP, "--processes", "2", "--lease-seconds", "2") as first:
        first.wait_ready()
        h = spin.enqueue(3600)
        child = child_of(dsn, h.id)
        first.kill()
        wait_until(lambda: not alive(child), 10, message=f"child {child} to exit")
    with WorkerProcess(dsn, APP, "--processes", "1") as second:
        second.wait_ready()
        assert h.wait(timeout=60) not in (child, second.pid)
        assert procs.get_run(h.id).attempt == 2


def test_a_lost_lease_stops_the_child_and_writes_nothing(dsn: str, procs: pgqueue.App) -> None:
    """Worker `first` is frozen past its lease while its child spins; `second` rescues the
    run and finishes it. Once `first` thaws, it finds its lease lost: its child is told,
    then killed after the grace, and nothing of its attempt is written."""
    args = ("--processes", "1", "--lease-seconds", "2", "--grace", "1")
    with WorkerProcess(dsn, APP, *args) as first:
        first.wait_ready()
        h = spin.enqueue(3600)
        child = child_of(dsn, h.id)
        first.signal(signal.SIGSTOP)
        try:
            with WorkerProcess(dsn, APP, "--processes", "1") as second:
                second.wait_ready()
                done = h.wait(timeout=60)
        finally:
            first.signal(signal.SIGCONT)
        wait_until(lambda: not alive(child), 20, message=f"child {child} to be stopped")
        run = procs.get_run(h.id)
        assert (run.state, run.attempt, run.result) == ("succeeded", 2, done)
        first.signal(signal.SIGTERM)
        assert first.wait(30) == 0
        log = first.output()
    assert done != child and f"killing child process {child}" in log, log
    assert "its lease was lost" in log, log


def test_the_app_path_is_found_or_must_be_given() -> None:
    assert Worker(procs_app, processes=1).app_path == APP
    assert Worker(procs_app, processes=2).concurrency == 2
    with pytest.raises(ValueError, match="processes"):
        Worker(procs_app, processes=0)
    with pytest.raises(ValueError, match="MODULE:ATTR"):
        Worker(procs_app, processes=1, app_path="tests.apps.procs")


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_processes_value_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], dsn: str, value: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["worker", "--dsn", dsn, "--app", APP, "--processes", value])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "--processes" in err, err


def test_the_python_api_runs_a_burst_in_children(procs: pgqueue.App) -> None:
    """app.worker(processes=N) in this process (its main thread): the app's path is
    found from its tasks' module, and the burst ends with every child gone."""
    handles = pid.enqueue_many([() for _ in range(6)])
    worker = procs.worker(processes=2, install_signal_handlers=False)
    worker.run(burst=True)
    pids = {procs.get_run(h.id).result for h in handles}
    assert os.getpid() not in pids and len(pids) <= 2, pids
    for child in pids:
        wait_until(lambda c=child: not alive(c), 10, message=f"child {child} to exit")


def test_children_that_cannot_import_the_app_stop_the_worker(procs: pgqueue.App) -> None:
    worker = procs.worker(
        processes=1, app_path="tests.apps.procs:nothing", install_signal_handlers=False
    )
    with pytest.raises(ConfigError, match="cannot be imported in a fresh process"):
        worker.run(burst=True)


def test_a_framework_command_needs_an_app_path_for_processes(
    capsys: pytest.CaptureFixture[str], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The App a framework's command configured is imported by the children from the
    module of its tasks (tests/contrib/django: manage.py pgqueue worker --processes); one
    whose tasks' modules do not hold it needs --app."""
    from pgqueue.contrib import _cli

    monkeypatch.setattr(_cli, "current_app", pgqueue.App(dsn))
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "worker",
                "--dsn",
                dsn,
                "--app",
                "pgqueue.contrib._cli:current_app",
                "--processes",
                "2",
            ]
        )
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "--app MODULE:ATTR" in err, err
