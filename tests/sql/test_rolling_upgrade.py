"""The compatibility window (docs/upgrading.md): the code of the previous release keeps
working against the schema of this one, so operators migrate first and then roll their
workers.

The previous release's code is exported from git (releases.toml names its commit, so a
checkout without tags works too) and run from its tree with PYTHONPATH, on the same
dependencies as ours. The old code migrates a database to its own head revision and runs
as a producer that enqueues continuously and as two workers; this release's `pgqueue
migrate` runs meanwhile, then a worker of this release joins them. Nothing enqueued may
fail, every run must finish exactly once, and the old workers must go on working, as must
an old worker that starts after the migration (it warns that the schema is newer).

Which old code: releases.toml's [rolling_upgrade_from]. 0.2.0's schema (0023) is still
the newest, so 0.2.0 itself would exercise no migration at all, and 0.1.0 (schema 0001)
predates the window (its enqueue leaves runs.group_key NULL, which 0004 refuses). The test
runs 0.2.0's code as it stood at schema 0020, the last commit before 0021: the migration
under load then replaces every function (0021), repairs data and adds CHECK constraints
to runs and events (0022), and replaces retry() (0023).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import migrate
from tests.apps.rolling import DONE_DDL
from tests.helpers import ROOT, empty_database, scalar, wait_until

RELEASES = tomllib.loads((ROOT / "releases.toml").read_text())
OLD = RELEASES["rolling_upgrade_from"]


def test_releases_toml_names_every_release_up_to_this_version() -> None:
    """releases.toml, which the test reads when the checkout has no tags, agrees with the
    code: its newest release is this version, every schema it names is a revision we know,
    and the old code of the rolling upgrade test has a schema older than our head."""
    releases = RELEASES["release"]
    assert releases[-1]["version"] == pgqueue.__version__
    known = migrate.revisions()
    for release in [*releases, OLD]:
        assert len(release["commit"]) == 40, release
        assert release["schema"] in known, release
    assert known.index(OLD["schema"]) < known.index(migrate.head())


def git(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, **kwargs
    )


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The old code's pgqueue package, with its sql/ and migrations/ where the installed
    package has them (pgqueue.sql, pgqueue.migrations)."""
    commit = OLD["commit"]
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        message = (
            f"commit {commit} (the old code of the rolling upgrade test, releases.toml) is "
            "not in this checkout: fetch the history (git fetch --unshallow, or "
            "actions/checkout with fetch-depth: 0)"
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    tree = tmp_path_factory.mktemp("old-pgqueue")
    archive = subprocess.run(
        ["git", "archive", commit, "pgqueue", "sql", "migrations"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    (tree / "pgqueue" / "sql").symlink_to(tree / "sql")
    (tree / "pgqueue" / "migrations").symlink_to(tree / "migrations")
    return tree


class Process:
    """A pgqueue process of the old or the new code, its output in a file."""

    def __init__(self, args: list[str], pythonpath: Path, dsn: str, log: Path) -> None:
        env = {**os.environ, "PYTHONPATH": f"{pythonpath}{os.pathsep}{ROOT}", "PGQUEUE_DSN": dsn}
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *args],
                cwd=log.parent,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )

    def output(self) -> str:
        return self.log.read_text()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def run(args: list[str], pythonpath: Path, dsn: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{pythonpath}{os.pathsep}{ROOT}", "PGQUEUE_DSN": dsn}
    return subprocess.run(
        [sys.executable, *args],
        cwd=pythonpath,  # `python -m` puts the working directory first on sys.path
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def database(server_params: dict[str, Any]) -> Iterator[str]:
    with empty_database(server_params, "pgqueue_rolling") as dsn:
        yield dsn


def worker(tree: Path, dsn: str, log: Path) -> Process:
    args = ["-m", "pgqueue", "worker", "--app", "tests.apps.rolling:app", "--queues", "rolling"]
    return Process([*args, "--concurrency", "4", "--poll-interval", "0.5"], tree, dsn, log)


def done_by(dsn: str, pid: int) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM rolling_done WHERE pid = %s", (pid,)))


@pytest.mark.slow
def test_the_previous_release_enqueues_and_works_while_this_one_migrates(
    old_tree: Path, database: str, tmp_path: Path
) -> None:
    dsn = database
    migrated = run(["-m", "pgqueue", "migrate", "--dsn", dsn], old_tree, dsn)
    assert migrated.returncode == 0, migrated.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert migrate.current(conn) == OLD["schema"]
        conn.execute(DONE_DDL)

    stop = tmp_path / "stop"
    producer = Process(["-m", "tests.apps.rolling", str(stop)], old_tree, dsn, tmp_path / "p")
    old_workers = [worker(old_tree, dsn, tmp_path / f"old{i}") for i in range(2)]
    new_worker: Process | None = None
    try:
        # the old code works on its own schema
        for w in old_workers:
            wait_until(lambda w=w: done_by(dsn, w.proc.pid) >= 20 or not w.alive(), 60)
            assert w.alive(), w.output()

        # this release migrates under load
        migrated = run(["-m", "pgqueue", "migrate", "--dsn", dsn], ROOT, dsn)
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert migrate.current(conn) == migrate.head()
            after = conn.execute("SELECT count(*) FROM rolling_done").fetchone()[0]  # type: ignore[index]

        # the old workers go on after the migration, an old one (re)starts on the new
        # schema (a crash or a scale-up during the deploy), and a new one joins them
        old_workers.append(worker(old_tree, dsn, tmp_path / "old-restarted"))
        new_worker = worker(ROOT, dsn, tmp_path / "new")
        since = "SELECT count(*) FROM rolling_done WHERE pid = %s AND at > %s"
        with psycopg.connect(dsn, autocommit=True) as conn:
            mark = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        for w in [*old_workers, new_worker]:
            wait_until(
                lambda w=w: scalar(dsn, since, (w.proc.pid, mark)) >= 20 or not w.alive(), 60
            )
            assert w.alive(), w.output()
        assert scalar(dsn, "SELECT count(*) FROM rolling_done") > after

        # the old code inspects the new schema
        for command in (["runs", "list", "--limit", "5"], ["stats"], ["queues"]):
            shown = run(["-m", "pgqueue", *command, "--dsn", dsn], old_tree, dsn)
            assert shown.returncode == 0, (command, shown.stderr)

        stop.touch()
        assert producer.proc.wait(60) == 0, producer.output()
        lines = producer.output().splitlines()
        failed = [line for line in lines if line.startswith("failed")]
        assert not failed, failed[:5]
        acknowledged = sorted(int(line.split()[1]) for line in lines if line.startswith("ok"))
        assert acknowledged == list(range(1, len(acknowledged) + 1))

        unfinished = "SELECT count(*) FROM pgqueue.runs WHERE state <> 'succeeded'"
        wait_until(lambda: scalar(dsn, unfinished) == 0, 120, message="every run to finish")
        with psycopg.connect(dsn, autocommit=True) as conn:
            runs = conn.execute("SELECT (args->>0)::bigint FROM pgqueue.runs ORDER BY 1").fetchall()
            done = conn.execute("SELECT n FROM rolling_done ORDER BY n").fetchall()
        assert [n for (n,) in runs] == acknowledged  # nothing lost, nothing extra
        assert [n for (n,) in done] == acknowledged  # each body ran exactly once
    finally:
        stop.touch()
        codes = [p.stop() for p in [producer, *old_workers, *filter(None, [new_worker])]]
    logs = {w.log.name: w.output() for w in [*old_workers, *filter(None, [new_worker])]}
    assert codes[1:] == [0] * len(codes[1:]), logs
    for name, text in logs.items():
        assert "Traceback" not in text, (name, text)
    assert "newer than this pgqueue" in logs["old-restarted"], logs["old-restarted"]
