"""`pgqueue worker --reload`: a real supervisor process restarts its worker when a task
file changes, and the new code runs; without watchfiles, a one-line error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import pgqueue
from tests.cli.helpers import assert_user_error, cli
from tests.helpers import ROOT, scalar, wait_until

TASKS = """
import pgqueue

app = pgqueue.App()


@app.task(name="reload.version")
def version() -> str:
    return "{version}"
"""


def worker_pids(dsn: str) -> list[int]:
    return list(
        scalar(dsn, "SELECT coalesce(array_agg(pid ORDER BY pid), '{}') FROM pgqueue.workers")
    )


def test_a_changed_task_file_restarts_the_worker_with_the_new_code(
    dsn: str, app: pgqueue.App, tmp_path: Path
) -> None:
    source = tmp_path / "reloadable_tasks.py"
    source.write_text(TASKS.format(version="v1"))
    log = (tmp_path / "supervisor.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pgqueue",
            "worker",
            "--reload",
            "--reload-dir",
            str(tmp_path),
            "--app",
            "reloadable_tasks:app",
            "--dsn",
            dsn,
            "--grace",
            "2",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        first = wait_until(lambda: worker_pids(dsn), timeout=30, message="the first worker")
        assert proc.pid not in first  # the worker is a child; this process only watches
        assert app.enqueue_by_name("reload.version").wait(timeout=20) == "v1"

        source.write_text(TASKS.format(version="v2"))
        second = wait_until(
            lambda: (pids := worker_pids(dsn)) and not set(pids) & set(first) and pids,
            timeout=30,
            message="a new worker process to replace the first",
        )
        assert len(second) == 1
        assert app.enqueue_by_name("reload.version").wait(timeout=20) == "v2"

        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        wait_until(lambda: not worker_pids(dsn), message="the worker to deregister")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
    text = (tmp_path / "supervisor.log").read_text()
    assert "reloadable_tasks.py changed; restarting the worker" in text, text


def test_reload_without_watchfiles_says_what_to_install(
    capsys: Any, monkeypatch: pytest.MonkeyPatch, dsn: str
) -> None:
    monkeypatch.setitem(sys.modules, "watchfiles", None)  # import fails as if not installed
    result = cli(capsys, "worker", "--reload", "--app", "tests.apps.basic:app", "--dsn", dsn)
    assert_user_error(result, "--reload needs watchfiles", "pgqueue-jobs[reload]")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--reload", "--burst"], "cannot go with --burst"),
        (["--reload-dir", "."], "--reload-dir only applies with --reload"),
        (["--reload", "--reload-dir", "/no/such/dir"], "no such directory"),
    ],
)
def test_reload_option_errors(capsys: Any, dsn: str, args: list[str], fragment: str) -> None:
    result = cli(capsys, "worker", *args, "--app", "tests.apps.basic:app", "--dsn", dsn)
    assert_user_error(result, fragment)
