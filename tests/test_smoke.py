from __future__ import annotations

import re
import subprocess
import sys

import pgqueue


def test_enqueue_and_burst_worker(app: pgqueue.App) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    handle = add.enqueue(2, 3)
    app.worker(install_signal_handlers=False).run(burst=True)
    assert handle.wait(timeout=5) == 5
    run = app.get_run(handle.id)
    assert (run.state, run.attempt) == ("succeeded", 1)


def test_the_demo_runs_every_run_to_success(dsn: str) -> None:
    """`pgqueue demo` (the README's first command; here on the test server, not the
    embedded one): its batch and workflows run through a real worker to the end."""
    out = subprocess.run(
        [sys.executable, "-m", "pgqueue", "demo", "--dsn", dsn, "--runs", "20"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    summary = out.stdout + out.stderr
    match = re.search(r"states: (.*)", summary)
    assert match and match[1].startswith("succeeded ") and "," not in match[1], summary
    assert "SELECT pgqueue.enqueue(" in summary
