"""pgqueue.contrib.flask, tested through the example app (examples/flask_app/signup.py):
Flask's test client in this process, `flask pgqueue worker` as a real process."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("flask")
pytest.importorskip("flask_sqlalchemy")

from psycopg.conninfo import conninfo_to_dict

from pgqueue.db import migrate
from tests.helpers import scalar
from tests.webapps import EXAMPLES, Databases, run_command, sqlalchemy_url

APP_DIR = EXAMPLES / "flask_app"


@pytest.fixture(scope="module")
def template(postgresql_noproc: Any) -> Iterator[tuple[Databases, str]]:
    if str(APP_DIR) not in sys.path:
        sys.path.insert(0, str(APP_DIR))
    import signup

    databases = Databases(postgresql_noproc)
    name = databases.create("pgqueue_flask_tpl")
    dsn = databases.dsn(name)
    migrate.upgrade(dsn)
    app = signup.create_app({"SQLALCHEMY_DATABASE_URI": sqlalchemy_url(dsn)})
    with app.app_context():
        signup.db.create_all()
        signup.db.engine.dispose()
    signup.tasks.close()
    try:
        yield databases, name
    finally:
        databases.drop(name)


@pytest.fixture
def site(template: tuple[Databases, str]) -> Iterator[tuple[Any, str]]:
    """The example app on a fresh copy of the template database."""
    import signup

    databases, template_name = template
    name = databases.create("pgqueue_flask", template=template_name)
    dsn = databases.dsn(name)
    app = signup.create_app({"SQLALCHEMY_DATABASE_URI": sqlalchemy_url(dsn)})
    try:
        yield app, dsn
    finally:
        with app.app_context():
            signup.db.engine.dispose()
        signup.tasks.close()
        databases.drop(name)


def flask_cli(dsn: str, *args: str) -> str:
    done = run_command(
        ["-m", "flask", "--app", "signup", "pgqueue", *args],
        cwd=APP_DIR,
        env={"DATABASE_URL": sqlalchemy_url(dsn)},
    )
    return done.stdout


def test_signup_commits_user_and_run_together_then_a_worker_runs_it(site: tuple[Any, str]) -> None:
    app, dsn = site
    client = app.test_client()
    response = client.post("/signup", data={"email": "ann@example.com"})
    assert response.status_code == 201, response.data
    user, run = response.json["user"], response.json["run"]
    assert scalar(dsn, 'SELECT email FROM "user" WHERE id = %s', (user,)) == "ann@example.com"
    assert scalar(dsn, "SELECT state FROM pgqueue.runs WHERE id = %s", (run,)) == "queued"

    flask_cli(dsn, "worker", "--burst", "--log-level", "WARNING")

    assert client.get(f"/users/{user}").json["welcomed_at"] is not None
    assert scalar(dsn, "SELECT result FROM pgqueue.runs WHERE id = %s", (run,)) == (
        "welcomed ann@example.com"
    )
    listed = json.loads(flask_cli(dsn, "runs", "list", "--json"))
    assert [(r["id"], r["state"]) for r in listed] == [(run, "succeeded")]


def test_a_request_that_fails_after_enqueue_leaves_neither_user_nor_run(
    site: tuple[Any, str],
) -> None:
    app, dsn = site
    app.config["PROPAGATE_EXCEPTIONS"] = False
    response = app.test_client().post("/signup", data={"email": "bob@example.com", "fail": "1"})
    assert response.status_code == 500
    assert scalar(dsn, 'SELECT count(*) FROM "user"') == 0
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 0


def test_config_session_joining_and_migrate_command(
    site: tuple[Any, str], template: tuple[Databases, str]
) -> None:
    import signup

    app, dsn = site
    # The DSN came from SQLALCHEMY_DATABASE_URI.
    assert conninfo_to_dict(signup.tasks.dsn)["dbname"] == conninfo_to_dict(dsn)["dbname"]
    with app.app_context():
        alone = signup.send_welcome.enqueue(1)  # no session transaction: committed at once
        signup.db.session.add(signup.User(email="cy@example.com"))
        joined = signup.send_welcome.enqueue(2)  # joins the session's transaction
        assert scalar(dsn, "SELECT array_agg(id) FROM pgqueue.runs") == [alone.id]
        signup.db.session.rollback()
    assert scalar(dsn, "SELECT array_agg(id) FROM pgqueue.runs") == [alone.id]
    assert joined.id != alone.id
    # Without joining, enqueue commits at once even inside a session transaction.
    other = signup.create_app(
        {"SQLALCHEMY_DATABASE_URI": sqlalchemy_url(dsn), "PGQUEUE_JOIN_SESSION": False}
    )
    with other.app_context():
        signup.db.session.add(signup.User(email="dee@example.com"))
        signup.send_welcome.enqueue(3)
        signup.db.session.rollback()
        signup.db.engine.dispose()
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 2

    databases, _ = template
    empty = databases.create("pgqueue_flask_empty")
    try:
        out = flask_cli(databases.dsn(empty), "migrate")
        assert f"revision {migrate.head()}" in out
        assert scalar(databases.dsn(empty), "SELECT version_num FROM pgqueue.alembic_version") == (
            migrate.head()
        )
    finally:
        databases.drop(empty)


def test_eager_runs_a_task_in_the_requests_app_context_and_session(
    site: tuple[Any, str],
) -> None:
    """pgqueue.testing.eager() in a request: the task runs in the request's app context, so
    its db.session is the request's and sees the user the view flushed (a new app
    context would have a new session, on another connection, and find no such user)."""
    import signup

    from pgqueue import testing

    app, dsn = site
    with testing.eager(signup.tasks) as runs:
        response = app.test_client().post("/signup", data={"email": "eve@example.com"})
    assert response.status_code == 201, response.data
    assert [(r.state, r.result) for r in runs] == [("succeeded", "welcomed eve@example.com")]
    welcomed = 'SELECT welcomed_at IS NOT NULL FROM "user" WHERE email = %s'
    assert scalar(dsn, welcomed, ("eve@example.com",)) is True
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 0


def test_flask_pgqueue_worker_gets_the_default_concurrency(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`flask pgqueue worker` with no --concurrency gets the default app.worker() gets:
    100 while every task of the app is async, 10 once one is sync; an explicit one wins."""
    from flask import Flask

    import pgqueue
    from pgqueue.contrib.flask import PgQueue
    from pgqueue.worker import ASYNC_CONCURRENCY, SYNC_CONCURRENCY, Worker

    seen: list[int] = []
    monkeypatch.setattr(Worker, "run", lambda self, burst=False: seen.append(self.concurrency))
    flask_app = Flask("defaults")
    flask_app.config["PGQUEUE_DSN"] = dsn
    queue = PgQueue(flask_app, pgqueue_app=pgqueue.App(dsn))

    def worker(*options: str) -> int:
        result = flask_app.test_cli_runner().invoke(args=["pgqueue", "worker", *options])
        assert result.exit_code == 0, result.output
        return seen.pop()

    @queue.task(queue="a")
    async def fast() -> None: ...

    assert worker("--burst") == ASYNC_CONCURRENCY == queue.pgqueue_app.worker().concurrency
    assert worker("--burst", "--concurrency", "7") == 7

    @queue.task(queue="b")
    def slow() -> None: ...

    assert worker("--burst") == SYNC_CONCURRENCY == queue.pgqueue_app.worker().concurrency
    assert worker("--burst", "--queues", "a") == SYNC_CONCURRENCY
    queue.pgqueue_app.close()
