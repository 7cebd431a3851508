"""`pgqueue worker --reload`, for development: this process watches the source tree and
runs the worker as a child process, the same command without --reload, started again
whenever a Python file changes (as `uvicorn --reload` and `watchmedo auto-restart` do for
Celery). A restart stops the child as Ctrl-C would: SIGINT, so it drains its running tasks
and hands back the rest; one that is still running after `stop_timeout` seconds is killed
(its runs come back when their leases expire). Needs watchfiles (`pgqueue-jobs[reload]`)."""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from pgqueue.cli._common import fail

log = logging.getLogger("pgqueue.worker")

# Set in the child: a worker started by the reloader never reloads itself.
CHILD_ENV = "PGQUEUE_RELOAD_CHILD"


def child_command(argv: Sequence[str]) -> list[str]:
    """The command that started this process, without --reload / --reload-dir: the
    interpreter with its own options (`-m pgqueue`, `manage.py pgqueue`...) as given."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--reload":
            continue
        if arg == "--reload-dir":
            skip = True
            continue
        if arg.startswith("--reload-dir="):
            continue
        out.append(arg)
    return [sys.executable, *out]


def supervise(dirs: Sequence[str], stop_timeout: float) -> None:
    """Run the worker command in a child process until interrupted, restarting it on
    every change of a .py file under `dirs` (default: the current directory)."""
    try:
        import watchfiles
    except ImportError:
        fail("--reload needs watchfiles: pip install 'pgqueue-jobs[reload]' (or watchfiles)")
    paths = [str(Path(d).resolve()) for d in dirs] or [os.getcwd()]
    for path in paths:
        if not Path(path).is_dir():
            fail(f"--reload-dir {path}: no such directory")
    command = child_command(sys.orig_argv[1:])
    os.environ[CHILD_ENV] = "1"
    click.echo(f"pgqueue: watching {', '.join(paths)} for changes (.py files)", err=True)

    def changed(changes: set[tuple[Any, str]]) -> None:
        names = sorted({os.path.relpath(p) for _, p in changes})
        click.echo(f"pgqueue: {', '.join(names[:5])} changed; restarting the worker", err=True)

    watchfiles.run_process(
        *paths,
        target=shlex.join(command),
        target_type="command",
        watch_filter=watchfiles.PythonFilter(),
        callback=changed,
        debounce=400,
        sigint_timeout=max(1, int(stop_timeout)),
    )
