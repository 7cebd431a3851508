"""Django projects' own test suites with pgqueue: pytest-django and `manage.py test`, each run
as a real process on the example project (examples/django_project) against a development
database of its own. pgqueue must follow Django to the test database (migrate, enqueue,
drain, the schema made by Django's migrate), leave the development database untouched, and
let Django drop the test database at the end."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django")
pytest.importorskip("pytest_django")
if importlib.util.find_spec("django.tasks") is None:
    pytest.importorskip("django_tasks")

from tests.helpers import ROOT, scalar
from tests.webapps import EXAMPLES, Databases

PROJECT = EXAMPLES / "django_project"

# Settings of the inner suites: the example project's, with a second alias on a second
# development database (for PGQUEUE['DATABASE'] overridden to it).
SETTINGS = """
import os
from myproj.settings import *  # noqa: F403

DATABASES["other"] = {**DATABASES["default"], "NAME": os.environ["OTHER_DATABASE"]}
"""

# The tests both runners run: the ORM writes of the tasks and pgqueue's runs must meet in
# the one test database.
CHECKS = """
import asyncio
import threading

from django.conf import settings
from django.core.management import call_command
from django.db import connections, transaction
from django.test import override_settings

from myproj.tasks import confirm_order
from orders.models import Order
from orders.tasks import send_receipt
from pgqueue import testing
from pgqueue.contrib.django import get_app


def pgqueue_database():
    with get_app().connection() as conn:
        return conn.info.dbname


def check_runs_meet_the_orm_in_the_test_database():
    test_name = connections["default"].settings_dict["NAME"]
    assert test_name.startswith("test_"), test_name
    assert pgqueue_database() == test_name
    order = Order.objects.create(email="ann@example.com")
    confirm_order.enqueue(order.pk)  # autocommit: pgqueue's own pool
    send_receipt.enqueue(order.pk)  # Django's tasks framework
    assert testing.drain(get_app())["succeeded"] == 2
    order.refresh_from_db()
    assert order.status == "confirmed" and order.receipt_sent_at is not None


def check_eager_runs_django_tasks_inline_in_the_callers_transaction():
    with transaction.atomic():
        order = Order.objects.create(email="eve@example.com")  # not committed
        with testing.eager(get_app()) as runs:
            result = send_receipt.enqueue(order.pk)
        assert [(r.state, r.result) for r in runs] == [
            ("succeeded", "receipt sent to eve@example.com")
        ]
        assert int(result.id) < 0  # an eager run: never a row
        order.refresh_from_db()
        assert order.receipt_sent_at is not None
    with get_app().connection() as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.runs").fetchone() == (0,)


def check_override_settings_moves_pgqueue_to_another_alias():
    other = connections["other"].settings_dict["NAME"]
    assert other.startswith("test_"), other
    with override_settings(PGQUEUE={**settings.PGQUEUE, "DATABASE": "other"}):
        call_command("pgqueue", "migrate")
        assert pgqueue_database() == other
        handle = confirm_order.enqueue(12345)
        with connections["other"].cursor() as cursor:
            cursor.execute("SELECT task FROM pgqueue.runs WHERE id = %s", [handle.id])
            assert cursor.fetchone() == ("myproj.tasks.confirm_order",)
    assert pgqueue_database() == connections["default"].settings_dict["NAME"]


def check_async_enqueues_on_a_loop_in_another_thread():
    # The loop outlives the test, as an ASGI server's or a background test loop does: its
    # pool holds the test database open until pgqueue closes it before the DROP.
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    order = Order.objects.create(email="amy@example.com")
    enqueued = asyncio.run_coroutine_threadsafe(confirm_order.enqueue_async(order.pk), loop)
    assert enqueued.result(30).created
    assert testing.drain(get_app())["succeeded"] == 1


def check_async_enqueues_on_a_loop_kept_between_tests():
    loop = asyncio.new_event_loop()  # not closed, not running: as pytest-asyncio keeps one
    order = Order.objects.create(email="joe@example.com")
    assert loop.run_until_complete(confirm_order.enqueue_async(order.pk)).created
    assert testing.drain(get_app())["succeeded"] == 1
"""

PYTEST_CONFTEST = """
import pytest
from django.core.management import call_command


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    # What docs/testing.md shows (Django's migrate does it too): it must reach the test
    # database.
    with django_db_blocker.unblock():
        call_command("pgqueue", "migrate")
"""

PYTEST_TESTS = """
import pytest

from inner_checks import (
    check_async_enqueues_on_a_loop_in_another_thread,
    check_eager_runs_django_tasks_inline_in_the_callers_transaction,
    check_override_settings_moves_pgqueue_to_another_alias,
    check_runs_meet_the_orm_in_the_test_database,
)


@pytest.mark.django_db  # in a transaction rolled back at the end: eager needs no commit
def test_eager_runs_django_tasks_inline_in_the_callers_transaction():
    check_eager_runs_django_tasks_inline_in_the_callers_transaction()


@pytest.mark.django_db(transaction=True)
def test_runs_meet_the_orm_in_the_test_database():
    check_runs_meet_the_orm_in_the_test_database()


@pytest.mark.django_db(transaction=True, databases=["default", "other"])
def test_override_settings_moves_pgqueue_to_another_alias():
    check_override_settings_moves_pgqueue_to_another_alias()


@pytest.mark.django_db(transaction=True)
def test_async_enqueues_on_a_loop_in_another_thread():
    check_async_enqueues_on_a_loop_in_another_thread()
"""

DJANGO_TESTS = """
from django.test import TransactionTestCase

from inner_checks import (
    check_async_enqueues_on_a_loop_kept_between_tests,
    check_override_settings_moves_pgqueue_to_another_alias,
    check_runs_meet_the_orm_in_the_test_database,
)


class PgQueueTests(TransactionTestCase):
    databases = {"default", "other"}

    def test_runs_meet_the_orm_in_the_test_database(self):
        check_runs_meet_the_orm_in_the_test_database()

    def test_override_settings_moves_pgqueue_to_another_alias(self):
        check_override_settings_moves_pgqueue_to_another_alias()

    def test_async_enqueues_on_a_loop_kept_between_tests(self):
        check_async_enqueues_on_a_loop_kept_between_tests()
"""


@pytest.fixture
def development(postgresql_noproc: Any) -> Iterator[tuple[Databases, list[str]]]:
    """Two empty development databases (DATABASES 'default' and 'other')."""
    databases = Databases(postgresql_noproc)
    names = [databases.create("pgqueue_dev"), databases.create("pgqueue_dev_other")]
    try:
        yield databases, names
    finally:
        for name in names:
            databases.drop(name)
            databases.drop(f"test_{name}")  # should not exist: dropped here if left behind


def write_suite(where: Path, files: dict[str, str]) -> None:
    for name, text in {
        "inner_settings.py": SETTINGS,
        "inner_checks.py": CHECKS,
        **files,
    }.items():
        (where / name).write_text(textwrap.dedent(text))


def run_suite(
    args: list[str], where: Path, databases: Databases, names: list[str]
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGQUEUE_", "DJANGO_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(where), str(PROJECT), str(ROOT)]),
        DJANGO_SETTINGS_MODULE="inner_settings",
        DATABASE_URL=databases.dsn(names[0]),
        OTHER_DATABASE=names[1],
    )
    return subprocess.run(
        [sys.executable, *args],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def assert_untouched_and_cleaned_up(databases: Databases, names: list[str]) -> None:
    for name in names:
        dsn = databases.dsn(name)
        tables = "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', %s)"
        assert scalar(dsn, tables, ("information_schema",)) == 0, f"{name} got tables"
        schema = "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'"
        assert scalar(dsn, schema) == 0, f"{name} got the pgqueue schema"
    left = "SELECT array_agg(datname) FROM pg_database WHERE datname = ANY(%s)"
    assert scalar(databases.dsn("postgres"), left, ([f"test_{n}" for n in names],)) is None


def test_a_pytest_django_suite_uses_the_test_database_and_leaves_none_behind(
    development: tuple[Databases, list[str]], tmp_path: Path
) -> None:
    databases, names = development
    write_suite(tmp_path, {"conftest.py": PYTEST_CONFTEST, "test_inner.py": PYTEST_TESTS})
    done = run_suite(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_inner.py"],
        tmp_path,
        databases,
        names,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
    assert "being accessed by other users" not in done.stdout + done.stderr
    assert_untouched_and_cleaned_up(databases, names)


def test_manage_py_test_uses_the_test_database_and_leaves_none_behind(
    development: tuple[Databases, list[str]], tmp_path: Path
) -> None:
    """Django's own runner, with no fixture at all: its migrate of the test databases
    creates pgqueue's schema there (post_migrate)."""
    databases, names = development
    write_suite(tmp_path, {"inner_tests.py": DJANGO_TESTS})
    done = run_suite(
        [str(PROJECT / "manage.py"), "test", "inner_tests", "-v", "1"],
        tmp_path,
        databases,
        names,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Ran 3 tests" in output and "OK" in output
    assert "being accessed by other users" not in output
    assert_untouched_and_cleaned_up(databases, names)


def test_manage_py_migrate_creates_the_pgqueue_schema_unless_turned_off(
    development: tuple[Databases, list[str]], tmp_path: Path
) -> None:
    """The Run model is unmanaged: Django's migration of it creates nothing, but its
    post_migrate runs pgqueue's migrations. PGQUEUE['MIGRATE'] = False leaves that to
    `manage.py pgqueue migrate`, and the system check says so."""
    from pgqueue.db import migrate

    databases, names = development
    write_suite(
        tmp_path,
        {"no_migrate_settings.py": SETTINGS + 'PGQUEUE = {**PGQUEUE, "MIGRATE": False}\n'},
    )
    manage = str(PROJECT / "manage.py")
    done = run_suite([manage, "migrate"], tmp_path, databases, names)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Applying pgqueue.0001_initial... OK" in done.stdout
    assert f"pgqueue schema (pgqueue's own migrations) at revision {migrate.head()}" in done.stdout
    version = "SELECT version_num FROM pgqueue.alembic_version"
    assert scalar(databases.dsn(names[0]), version) == migrate.head()

    other = [names[1], names[0]]  # DATABASES['default'] on the second database
    off = ["--settings", "no_migrate_settings"]
    done = run_suite([manage, "migrate", *off], tmp_path, databases, other)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pgqueue schema" not in done.stdout
    dsn = databases.dsn(names[1])
    assert scalar(dsn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 0
    check = run_suite([manage, "check", "--database", "default", *off], tmp_path, databases, other)
    assert "pgqueue.W003" in check.stderr + check.stdout
    assert "manage.py pgqueue migrate" in check.stderr + check.stdout
