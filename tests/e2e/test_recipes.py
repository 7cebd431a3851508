"""The production recipe at the end of each framework guide works as written: its deploy
step, its systemd unit (`systemd-analyze verify`, and its ExecStart run), its Procfile's
release and worker lines and its container entrypoint are taken from the Markdown and run
against a fresh, empty database from the example app's directory. A worker exits 0 only
on a migrated schema (2 otherwise), so each worker run, with --burst added, proves that the
recipe's own migration step ran."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT
from tests.webapps import EXAMPLES, Databases, sqlalchemy_url

BIN = Path(sys.executable).parent


# guide: (the example app it describes, the environment that points it at a database)
GUIDES: dict[str, tuple[Path, Callable[[str], dict[str, str]]]] = {
    "django.md": (EXAMPLES / "django_project", lambda dsn: {"DATABASE_URL": dsn}),
    "flask.md": (EXAMPLES / "flask_app", lambda dsn: {"DATABASE_URL": sqlalchemy_url(dsn)}),
    "asyncio.md": (EXAMPLES / "fastapi_app", lambda dsn: {"PGQUEUE_DSN": dsn}),
}


class Recipe:
    """The fenced blocks of a guide's `## Production recipe` section."""

    def __init__(self, guide: str) -> None:
        text = (ROOT / "docs" / guide).read_text()
        start = text.index("## Production recipe")
        end = text.find("\n## ", start + 1)
        section = text[start : end if end != -1 else None]
        self.blocks = re.findall(r"```(\w*)\n(.*?)```", section, re.S)
        assert self.blocks, f"{guide}: no blocks in its production recipe"

    def one(self, lang: str, test: Callable[[str], bool] = lambda _: True) -> str:
        found = [body for kind, body in self.blocks if kind == lang and test(body)]
        assert len(found) == 1, (lang, found)
        return found[0]

    @property
    def deploy(self) -> str:
        return self.one("sh", lambda b: not b.startswith("#!"))

    @property
    def entrypoint(self) -> str:
        return self.one("sh", lambda b: b.startswith("#!/bin/sh"))

    @property
    def unit(self) -> str:
        return self.one("ini", lambda b: "[Service]" in b)

    @property
    def procfile(self) -> dict[str, str]:
        lines = self.one("procfile").strip().splitlines()
        return dict(line.split(": ", 1) for line in lines)

    @property
    def cmd(self) -> list[str]:
        line = next(x for x in self.one("dockerfile").splitlines() if x.startswith("CMD "))
        return list(json.loads(line.removeprefix("CMD ")))


@pytest.fixture
def fresh(postgresql_noproc: Any) -> Iterator[Callable[[], str]]:
    """Empty databases (no pgqueue schema): the recipe must create it."""
    dbs = Databases(postgresql_noproc)
    made: list[str] = []

    def make() -> str:
        made.append(dbs.create("recipe"))
        return dbs.dsn(made[-1])

    yield make
    for name in made:
        dbs.drop(name)


def run(command: str, cwd: Path, env: dict[str, str], timeout: float = 120) -> None:
    """A recipe's shell command, as a deploy would run it: the venv's bin first on PATH
    (python, pgqueue, flask), the example app importable."""
    full = {k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DSN", "DATABASE_URL")}
    full["PATH"] = f"{BIN}{os.pathsep}{full.get('PATH', '')}"
    full["PYTHONPATH"] = os.pathsep.join([str(cwd), str(ROOT)])
    full.update(env)
    done = subprocess.run(
        ["sh", "-c", command], cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, (
        f"{command!r} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    )


def burst(command: str) -> str:
    assert " pgqueue worker" in f" {command}", command
    return f"{command} --burst --log-level WARNING"


@pytest.mark.parametrize("guide", sorted(GUIDES))
def test_the_deploy_step_and_the_procfile_run(guide: str, fresh: Callable[[], str]) -> None:
    where, env_of = GUIDES[guide]
    recipe = Recipe(guide)
    # the deploy step alone migrates a new database; a worker then starts on it
    env = env_of(fresh())
    run(recipe.deploy.strip(), where, env)
    run(burst(recipe.procfile["worker"]), where, env)
    # the Procfile on its own: release first, then the worker line
    env = env_of(fresh())
    procs = recipe.procfile
    assert {"web", "worker", "release"} <= procs.keys()
    run(procs["release"], where, env)
    run(burst(procs["worker"]), where, env)


@pytest.mark.parametrize("guide", sorted(GUIDES))
def test_the_container_entrypoint_migrates_then_execs_the_worker(
    guide: str, fresh: Callable[[], str], tmp_path: Path
) -> None:
    where, env_of = GUIDES[guide]
    recipe = Recipe(guide)
    script = tmp_path / "docker-entrypoint.sh"
    script.write_text(recipe.entrypoint)
    assert recipe.entrypoint.rstrip().endswith('exec "$@"')
    cmd = shlex.join([str(script), *recipe.cmd])
    run(f"sh {burst(cmd)}", where, env_of(fresh()))


@pytest.mark.parametrize("guide", sorted(GUIDES))
def test_the_systemd_unit_verifies_and_its_command_runs(
    guide: str, fresh: Callable[[], str], tmp_path: Path
) -> None:
    where, env_of = GUIDES[guide]
    unit = Recipe(guide).unit
    name = re.search(r"/etc/systemd/system/(\S+@)\.service", unit)
    assert name, "the unit names its file"
    exec_start = re.search(r"^ExecStart=(/\S+/\.venv/bin/)(.*)$", unit, re.M)
    assert exec_start, "ExecStart runs a program of the project's venv"
    environment = dict(
        line.removeprefix("Environment=").split("=", 1)
        for line in unit.splitlines()
        if line.startswith("Environment=")
    )
    # the same command from this test's venv, against a database the deploy step migrated
    env = env_of(fresh()) | environment
    run(Recipe(guide).deploy.strip(), where, env)
    run(burst(exec_start[2]), where, env)
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    path = tmp_path / f"{name[1]}1.service"
    path.write_text(unit.replace(exec_start[1], f"{BIN}/"))
    done = subprocess.run(
        [analyze, "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
