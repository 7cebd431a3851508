"""The distribution as a user gets it: the wheel and the sdist built from this tree, each
installed into a fresh virtualenv, then `pgqueue migrate` and a worker run from a
directory that is not this repository (so nothing is imported from the source tree).

Slow (two virtualenvs, a build); CI runs it with the rest of the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pgqueue
from pgqueue.db import migrate
from tests.helpers import ROOT, scalar
from tests.webapps import Databases

pytestmark = [pytest.mark.packaging, pytest.mark.slow, pytest.mark.timeout(1200)]

DISTRIBUTION = "pgqueue-jobs"
TASKS = """
import pgqueue

app = pgqueue.App()


@app.task(queue="packaged")
def shout(word: str) -> str:
    return word.upper()
"""


def run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PGQUEUE_DSN")}
    done = subprocess.run(
        args, cwd=cwd, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        command = " ".join(args)
        raise AssertionError(f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


@pytest.fixture
def fresh_databases(postgresql_noproc: Any) -> Iterator[tuple[Databases, list[str]]]:
    databases = Databases(postgresql_noproc)
    names = [databases.create("pgqueue_pkg_wheel"), databases.create("pgqueue_pkg_sdist")]
    try:
        yield databases, names
    finally:
        for name in names:
            databases.drop(name)


def test_wheel_and_sdist_install_and_run_from_elsewhere(
    tmp_path: Path, fresh_databases: tuple[Databases, list[str]]
) -> None:
    databases, names = fresh_databases
    dist = tmp_path / "dist"
    log = run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=tmp_path)
    # Every folder that ships is a declared package, and the license is an SPDX expression.
    assert "would be ignored" not in log and "deprecated" not in log, log
    (wheel,) = dist.glob("pgqueue_jobs-*.whl")
    (sdist,) = dist.glob("pgqueue_jobs-*.tar.gz")
    check_metadata(wheel)
    run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)], cwd=tmp_path)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "tasks.py").write_text(textwrap.dedent(TASKS))
    for artifact, name in zip((wheel, sdist), names, strict=True):
        env_dir = tmp_path / f"venv-{artifact.suffix.lstrip('.')}"
        venv.create(env_dir, with_pip=True)
        python, pgqueue_cmd = env_dir / "bin" / "python", env_dir / "bin" / "pgqueue"
        run([str(python), "-m", "pip", "install", "-q", str(artifact)], cwd=elsewhere)
        where = run([str(python), "-c", "import pgqueue; print(pgqueue.__file__)"], cwd=elsewhere)
        assert where.strip().startswith(str(env_dir)), where

        dsn = databases.dsn(name)
        out = run([str(pgqueue_cmd), "migrate", "--dsn", dsn], cwd=elsewhere)
        assert f"revision {migrate.head()}" in out
        enqueue = "import tasks; print(tasks.shout.enqueue('packaged').id)"
        run_id = int(run([str(python), "-c", enqueue], cwd=elsewhere, env={"PGQUEUE_DSN": dsn}))
        run(
            [str(pgqueue_cmd), "worker", "--app", "tasks:app", "--burst", "--dsn", dsn],
            cwd=elsewhere,
        )
        query = "SELECT state || ' ' || result::text FROM pgqueue.runs WHERE id = %s"
        assert scalar(dsn, query, (run_id,)) == 'succeeded "PACKAGED"', artifact.name


def check_metadata(wheel: Path) -> None:
    """The distribution's name, and the django extra's environment markers: the
    django-tasks backport only where Django 6 cannot be installed (Python < 3.12)."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
    assert f"Name: {DISTRIBUTION}\n" in text
    assert f"Version: {pgqueue.__version__}\n" in text  # the one place it is written
    assert "License-Expression: MIT\n" in text and "Classifier: Typing :: Typed" in text
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in archive.namelist())
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist:")]
    django_tasks = [r for r in requires if "django-tasks" in r and 'extra == "django"' in r]
    assert len(django_tasks) == 1 and 'python_version < "3.12"' in django_tasks[0], requires
    django = [r for r in requires if r.startswith("Requires-Dist: django>") and '"django"' in r]
    assert any('python_version >= "3.12"' in r and "django>=6" in r for r in django), requires
