"""The schema: migrations apply cleanly, and the fast revision check agrees with alembic."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

from pgqueue.cli import main
from pgqueue.db import migrate
from tests.helpers import empty_database


def test_revision_files_form_the_chain_alembic_sees() -> None:
    with migrate._config(None) as cfg:
        assert isinstance(cfg, Config)
        script = ScriptDirectory.from_config(cfg)
        chain = [r.revision for r in reversed(list(script.walk_revisions()))]
        assert script.get_current_head() == migrate.head()
    assert chain == migrate.revisions()


@contextlib.contextmanager
def database_at(server_params: dict[str, Any], revision: str) -> Iterator[str]:
    """A scratch database migrated up to `revision` (its DSN), dropped afterwards."""
    from alembic import command

    with empty_database(server_params, f"pgqueue_upgrade{revision}") as dsn:
        with migrate._config(dsn) as cfg:
            command.upgrade(cfg, revision)
        yield dsn


def test_upgrade_to_0006_flags_the_unfinished_runs_of_limited_queues(
    server_params: dict[str, Any],
) -> None:
    with database_at(server_params, "0005") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO pgqueue.queues (name, concurrency) VALUES ('lim', 2)")
            conn.execute(
                "INSERT INTO pgqueue.runs (task, queue, state, finished_at)"
                " SELECT 't', q, s, CASE WHEN s = 'succeeded' THEN now() END"
                " FROM unnest(ARRAY['lim', 'free']) q,"
                "      unnest(ARRAY['queued', 'scheduled', 'succeeded']) s"
            )
        migrate.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            flagged = conn.execute(
                "SELECT queue, state FROM pgqueue.runs WHERE limited ORDER BY 1, 2"
            ).fetchall()
        assert flagged == [("lim", "queued"), ("lim", "scheduled")]


def test_upgrade_to_0018_unflags_the_runs_of_queues_with_only_a_rate_limit(
    server_params: dict[str, Any],
) -> None:
    with database_at(server_params, "0017") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO pgqueue.queues (name, rate_limit, rate_period, concurrency)"
                " VALUES ('rated', 5, 1, NULL), ('both', 5, 1, 2)"
            )
            conn.execute(
                "INSERT INTO pgqueue.runs (task, queue, state, limited, finished_at)"
                " SELECT 't', q, s, true, CASE WHEN s = 'succeeded' THEN now() END"
                " FROM unnest(ARRAY['rated', 'both']) q,"
                "      unnest(ARRAY['queued', 'scheduled', 'succeeded']) s"
            )
        migrate.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            flagged = conn.execute(
                "SELECT queue, state FROM pgqueue.runs WHERE limited ORDER BY 1, 2"
            ).fetchall()
            conn.execute("SELECT pgqueue.enqueue('t', queue => 'rated')")
            conn.execute("SELECT pgqueue.enqueue('t', queue => 'both')")
            new = conn.execute(
                "SELECT queue, limited FROM pgqueue.runs WHERE state = 'queued'"
                " ORDER BY id DESC LIMIT 2"
            ).fetchall()
        # a finished run keeps what it had: no index holds it either way
        assert flagged == [
            ("both", "queued"),
            ("both", "scheduled"),
            ("both", "succeeded"),
            ("rated", "succeeded"),
        ]
        assert new == [("both", True), ("rated", False)]


def test_upgrade_to_0016_keeps_the_counts_of_open_and_completed_batches(
    server_params: dict[str, Any],
) -> None:
    with database_at(server_params, "0015") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO pgqueue.batches (on_complete, queue, total, succeeded, failed,"
                " canceled, sealed_at) VALUES ('t', 'default', 3, 1, 1, 0, now()),"
                " ('t', 'default', 0, 0, 0, 0, now())"
            )
            conn.execute(
                "INSERT INTO pgqueue.runs (task, queue, state, batch_id, finished_at)"
                " VALUES ('m', 'default', 'succeeded', 1, now()),"
                " ('m', 'default', 'failed', 1, now()), ('m', 'default', 'queued', 1, NULL)"
            )
        migrate.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            counts = "SELECT id, total, succeeded, failed, canceled FROM pgqueue.batches"
            assert conn.execute(counts + " ORDER BY id").fetchall() == [
                (1, 3, 1, 1, 0),
                (2, 0, 0, 0, 0),
            ]
            # the last member of the open batch finishes: counted on top, and settled
            conn.execute("UPDATE pgqueue.runs SET state = 'canceled' WHERE state = 'queued'")
            assert conn.execute(counts + " WHERE id = 1").fetchone() == (1, 3, 1, 1, 1)
            callback = "SELECT callback_run_id IS NOT NULL FROM pgqueue.batches WHERE id = 1"
            assert conn.execute(callback).fetchone() == (True,)


def test_a_newer_schema_is_accepted_with_a_warning_an_older_one_refused(
    dsn: str, conn: psycopg.Connection[Any], capsys: Any, caplog: Any
) -> None:
    """What docs/operations.md says for rolling upgrades: an old worker or command that
    (re)starts after a newer release migrated works, and says it is behind."""

    def runs_list() -> tuple[Any, str]:
        with pytest.raises(SystemExit) as exc:
            main(["runs", "list", "--dsn", dsn])
        return exc.value.code, capsys.readouterr().err

    conn.execute("UPDATE pgqueue.alembic_version SET version_num = '9999'")
    with caplog.at_level("WARNING", logger="pgqueue"):
        assert runs_list()[0] == 0
    assert "newer than this pgqueue" in caplog.text
    conn.execute("UPDATE pgqueue.alembic_version SET version_num = '0006'")
    code, err = runs_list()
    assert code == 2 and "run `pgqueue migrate`" in err


def test_a_newer_schema_that_needs_a_newer_release_is_refused_in_one_line(
    dsn: str, conn: psycopg.Connection[Any], capsys: Any, caplog: Any
) -> None:
    """`pgqueue migrate` writes on the version table the oldest release that works with
    the schema (migrate.NEEDS); a release older than that says to upgrade, exit 2, where
    one inside the window only warns."""
    import pgqueue

    comment = "SELECT obj_description('pgqueue.alembic_version'::regclass, 'pg_class')"
    assert conn.execute(comment).fetchone() == (f"pgqueue >= {migrate.needs(migrate.head())}",)
    conn.execute("UPDATE pgqueue.alembic_version SET version_num = '9999'")
    conn.execute("COMMENT ON TABLE pgqueue.alembic_version IS 'pgqueue >= 99.1.0'")
    for command in (["runs", "list"], ["worker", "--app", "tests.apps.basic:app"]):
        with pytest.raises(SystemExit) as exc:
            main([*command, "--dsn", dsn])
        err = capsys.readouterr().err
        assert exc.value.code == 2, err
        assert err == (
            "error: the pgqueue schema (revision 9999) needs pgqueue >= 99.1.0, and this is "
            f"pgqueue {pgqueue.__version__}: upgrade pgqueue to >= 99.1.0 on this machine\n"
        )
    conn.execute(f"COMMENT ON TABLE pgqueue.alembic_version IS 'pgqueue >= {pgqueue.__version__}'")
    with caplog.at_level("WARNING", logger="pgqueue"), pytest.raises(SystemExit) as exc:
        main(["runs", "list", "--dsn", dsn])
    assert exc.value.code == 0 and "newer than this pgqueue" in caplog.text


def test_needs_names_for_each_revision_a_release_no_newer_than_this_one() -> None:
    """migrate.NEEDS, the compatibility window in one place: it starts at the first
    revision, and no revision needs a release after this one (a release cannot know of
    it); the release before 0.2.0 does not work with 0004 and later."""
    import pgqueue

    assert min(migrate.NEEDS) == migrate.revisions()[0]
    assert set(migrate.NEEDS) <= set(migrate.revisions())
    for revision in migrate.revisions():
        assert migrate._release(migrate.needs(revision)) <= migrate._release(pgqueue.__version__)
    assert migrate.needs("0003") == "0.1.0" and migrate.needs("0004") == "0.2.0"
    assert migrate._release("0.3.0.dev1") == (0, 3, 0) < migrate._release("0.10.0")


def test_upgrade_to_0009_shortens_stored_group_keys_too_long_for_limits(
    server_params: dict[str, Any],
) -> None:
    """A group key stored before 0009 that is too long for runs_group_claim_idx made every
    change giving its queue limits fail (`pgqueue queues set Q --group-concurrency 1`, a
    worker declaring them). After 0009 it is short, still shared by its runs, and they run
    under the limits."""
    import pgqueue

    with database_at(server_params, "0007") as dsn, contextlib.closing(pgqueue.App(dsn)) as app:
        # 3,200 characters that do not compress: too long for a btree entry
        long_key = "SELECT string_agg(md5(g::text), '') FROM generate_series(1, 100) g"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO pgqueue.runs (task, queue, state, group_key)"
                f" SELECT 't', 'q', s, ({long_key})"
                " FROM unnest(ARRAY['queued', 'queued', 'succeeded']) s"
            )
            conn.execute(
                "INSERT INTO pgqueue.runs (task, queue, state, group_key)"
                " VALUES ('t', 'q', 'queued', 'short')"
            )
        migrate.upgrade(dsn)
        app.set_limits("q", concurrency=None, group_concurrency=1)
        with psycopg.connect(dsn, autocommit=True) as conn:
            keys = conn.execute(
                "SELECT group_key, count(*), bool_and(limited OR state = 'succeeded')"
                " FROM pgqueue.runs GROUP BY 1 ORDER BY 2 DESC"
            ).fetchall()
            shortened = keys[0][0]
            assert keys == [(shortened, 3, True), ("short", 1, True)]
            assert len(shortened.encode()) == 100 + 1 + 32
            assert shortened.startswith(conn.execute(long_key).fetchone()[0][:100])  # type: ignore[index]
            # one permit per group: one run of each group is claimed
            claimed = conn.execute(
                "SELECT group_key FROM pgqueue.claim_limited('q', gen_random_uuid(), 10, 30)"
            ).fetchall()
        assert sorted(k for (k,) in claimed) == sorted([shortened, "short"])


def test_every_migration_is_forward_only_and_a_downgrade_changes_nothing(dsn: str) -> None:
    """docs/operations.md: migrations are forward-only. Each revision's downgrade() refuses
    (the first one too), and `alembic downgrade` leaves the schema at head."""
    from alembic import command

    with migrate._config(dsn) as cfg:
        script = ScriptDirectory.from_config(cfg)
        revisions = list(script.walk_revisions())
        assert len(revisions) == len(migrate.revisions())
        for rev in revisions:
            with pytest.raises(NotImplementedError, match="forward-only"):
                rev.module.downgrade()
        with pytest.raises(NotImplementedError, match="forward-only"):
            command.downgrade(cfg, "-1")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert migrate.current(conn) == migrate.head()
    with migrate._config(None) as cfg:
        template = Path(ScriptDirectory.from_config(cfg).dir) / "script.py.mako"
    assert 'raise NotImplementedError("pgqueue migrations are forward-only")' in (
        template.read_text()
    )


def test_every_pasted_definition_is_reloaded_from_sql() -> None:
    """A function or view whose definition lives in sql/functions or sql/views, created in
    a revision's .sql with its text pasted, is loaded from that file by the same revision
    or a later one: the text in sql/ is the one every database ends with."""
    root = Path(__file__).resolve().parents[2]
    versions = sorted((root / "migrations" / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    created = re.compile(r"CREATE (?:OR REPLACE )?(FUNCTION|VIEW) pgqueue\.(\w+)", re.I)
    unreloaded = []
    for i, py in enumerate(versions):
        pasted = py.with_suffix(".sql")
        if not pasted.exists():
            continue
        for kind, name in created.findall(pasted.read_text()):
            folder = "functions" if kind.upper() == "FUNCTION" else "views"
            if not (root / "sql" / folder / f"{name}.sql").exists():
                continue
            later = "".join(v.read_text() for v in versions[i:])
            # loads every file: a loop over all of sql/'s, or over history.functions()
            everything = f'definition(f"{folder}/{{name}}")' in later or (
                folder == "functions" and "in history.functions(revision)" in later
            )
            if not everything and f'"{folder}/{name}"' not in later:
                unreloaded.append(f"{pasted.name}: {folder}/{name}")
    assert not unreloaded, unreloaded


def _definitions_by_revision(
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[str, set[str], set[str]]]:
    """Each revision, in order, with the definitions its upgrade() loads from sql/ and
    those it creates from a text of its own ("functions/NAME", "views/NAME"), found by
    running upgrade() against a recorder instead of a database."""
    from pgqueue.migrations import online

    from pgqueue.db import sql as sql_files

    created = re.compile(r"CREATE (?:OR REPLACE )?(FUNCTION|VIEW) pgqueue\.(\w+)", re.I)
    executed: list[str] = []
    loaded: list[str] = []

    class Recorder:
        def execute(self, text: str) -> None:
            executed.append(text)

    def definition(path: str) -> str:
        loaded.append(path)
        return ""

    monkeypatch.setattr(sql_files, "definition", definition)
    # (statements run outside a revision's transaction create no definition)
    for name in online.__all__:
        monkeypatch.setattr(online, name, lambda *args, **kwargs: None)
    found = []
    with migrate._config(None) as cfg:
        for rev in reversed(list(ScriptDirectory.from_config(cfg).walk_revisions())):
            executed.clear()
            loaded.clear()
            monkeypatch.setattr(rev.module, "op", Recorder())
            rev.module.upgrade()
            own = {
                f"{'functions' if kind.upper() == 'FUNCTION' else 'views'}/{name}"
                for text in executed
                for kind, name in created.findall(text)
            }
            found.append((rev.revision, set(loaded), own))
    return found


def test_the_first_revisions_install_the_texts_they_were_released_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Revisions 0001-0007 were released with every function and view text pasted in
    their .sql. They load from sql/ only a definition that no later revision changes (the
    file's text is then the one they were released with), so a database migrated to any
    of them, not only to head, holds what it held at their release: a definition that
    changed later (pgqueue.retry(), pgqueue.claim_next_priority(), every function whose
    search_path 0021 pinned) stays pasted."""
    revisions = _definitions_by_revision(monkeypatch)
    assert [r for r, _, _ in revisions][:7] == [f"000{n}" for n in range(1, 8)]
    newer = []
    for i, (revision, loaded, _) in enumerate(revisions[:7]):
        for path in sorted(loaded):
            later = [r for r, load, own in revisions[i + 1 :] if path in load | own]
            if later:
                newer.append(f"{revision} loads {path}, changed again by {', '.join(later)}")
    assert not newer, newer
    assert {"views/failed", "views/workers_live"} <= revisions[2][1]


BUSY = r"pgqueue\.(?:runs|events|steps|run_errors)\b"
# an index built under a SHARE lock (writes wait) on a busy table
BLOCKING_INDEX = re.compile(
    rf"CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?!CONCURRENTLY)[^;]*?\bON\s+{BUSY}", re.I
)
# an UPDATE of a busy table's rows in the revision's transaction, not in batches
UNBATCHED_UPDATE = re.compile(rf"^\s*UPDATE\s+{BUSY}", re.I | re.M)


def test_revisions_after_the_last_release_change_busy_tables_online() -> None:
    """docs/upgrading.md, What a migration does: a revision made after the last release
    builds an index on runs, events, steps or run_errors CONCURRENTLY and updates their
    rows in batches (pgqueue.migrations.online), so that claims and enqueues do not wait
    for it. The revisions released before are as they were released (0004, 0005 and 0022
    were made online since, with the same results)."""
    import tomllib

    from tests.helpers import ROOT

    releases = tomllib.loads((ROOT / "releases.toml").read_text())["release"]
    released = releases[-1]["schema"]
    versions = ROOT / "migrations" / "versions"
    assert BLOCKING_INDEX.search((versions / "0001_initial.sql").read_text())
    assert UNBATCHED_UPDATE.search((versions / "0022_time_bounds.sql").read_text())
    offending = [
        f"{path.name}: {found.group(0)!r}"
        for path in sorted(versions.iterdir())
        if path.name[:4].isdigit() and path.name[:4] > released
        for pattern in (BLOCKING_INDEX, UNBATCHED_UPDATE)
        for found in pattern.finditer(path.read_text())
    ]
    assert not offending, offending


def test_the_sql_for_dbas_builds_the_schema_that_migrate_builds(
    server_params: dict[str, Any], dsn: str
) -> None:
    """`pgqueue migrate --sql` (docs/operations.md, For DBAs), run by psql on an empty
    database, gives the schema `pgqueue migrate` gives: its function bodies keep their
    `%` (they came out doubled, and RAISE refused them), and its statements that run
    outside a transaction (CREATE INDEX CONCURRENTLY) sit between transactions."""
    import os
    import shutil
    import subprocess

    from tests.sql.test_schema import renderings

    psql = shutil.which("psql")
    if psql is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("psql is not installed (CI installs PostgreSQL's client)")
        pytest.skip("psql is not installed")
    with empty_database(server_params, "pgqueue_offline") as offline:
        ran = subprocess.run(
            [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", offline],
            input=migrate.upgrade_sql(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stderr
        with psycopg.connect(offline, autocommit=True) as conn:
            assert migrate.current(conn) == migrate.head()
            built = renderings(conn)
            indexes = "SELECT indexdef FROM pg_indexes WHERE schemaname = 'pgqueue' ORDER BY 1"
            offline_indexes = conn.execute(indexes).fetchall()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert built == renderings(conn)
        assert offline_indexes == conn.execute(indexes).fetchall()


@pytest.mark.parametrize("revision", ["0022", "0025", "0027", "0028"])
def test_a_database_between_revisions_enqueues_from_sql(
    server_params: dict[str, Any], revision: str
) -> None:
    """A revision installs the functions its schema can run (migrations/history.py):
    pgqueue.enqueue() and enqueue_unique() as head has them write the columns of 0028,
    which a database at an earlier revision (or between two while migrate runs) lacks."""
    with database_at(server_params, revision) as dsn, psycopg.connect(dsn, autocommit=True) as c:
        # named: revisions before 0028 leave older overloads of enqueue() beside it
        row = c.execute("SELECT pgqueue.enqueue('t', timeout_seconds => NULL)").fetchone()
        assert row is not None and row[0] > 0
        run = '[[2], {}, null, null, "t", "default", 0, 3, null, null, null, null, "k", "queued"]'
        c.execute(
            "SELECT * FROM pgqueue.enqueue_unique(jsonb_build_array(%s::jsonb), NULL, NULL, true)",
            (run,),
        )
        assert c.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (2,)
