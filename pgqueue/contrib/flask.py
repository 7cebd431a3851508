"""pgqueue for Flask. See docs/flask.md.

    tasks = pgqueue.App()
    queue = PgQueue(pgqueue_app=tasks)      # or PgQueue(app, pgqueue_app=tasks)
    queue.init_app(app)

Config (all optional):
PGQUEUE_APP           the pgqueue.App, or "module:attr" (instead of pgqueue_app=)
PGQUEUE_DSN           the database (default: SQLALCHEMY_DATABASE_URI, else the App's own,
                      else $PGQUEUE_DSN)
PGQUEUE_NOTIFY        False for poolers in transaction mode
PGQUEUE_JOIN_SESSION  True (default): with Flask-SQLAlchemy on psycopg 3, an enqueue while
                      db.session has a transaction open joins it: the run commits with
                      db.session.commit(), and vanishes on rollback

Commands: `flask pgqueue worker`, `flask pgqueue migrate`, and every other `pgqueue`
command, with the app's DSN and App as defaults.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import click
import psycopg
from flask import Flask, current_app, has_app_context
from flask.cli import with_appcontext

from pgqueue.app import App
from pgqueue.contrib import _cli
from pgqueue.errors import ConfigError

EXTENSION = "pgqueue"

# DSNs this extension gave to Apps: a later init_app (another Flask app, a test) may
# replace them, but never a DSN the user passed to App(dsn=...).
_derived: weakref.WeakKeyDictionary[App, str] = weakref.WeakKeyDictionary()


class PgQueue:
    def __init__(self, app: Flask | None = None, *, pgqueue_app: App | str | None = None):
        self._pgqueue_app = pgqueue_app
        self._flask_app: Flask | None = None
        if app is not None:
            self.init_app(app)

    @property
    def pgqueue_app(self) -> App:
        """The pgqueue App (for enqueue, get_run, cancel...)."""
        if not isinstance(self._pgqueue_app, App):
            raise RuntimeError("PgQueue: call init_app(app) first (or pass pgqueue_app=)")
        return self._pgqueue_app

    def init_app(self, app: Flask) -> None:
        spec = self._pgqueue_app or app.config.get("PGQUEUE_APP") or App()
        pgqueue_app = _load(spec) if isinstance(spec, str) else spec
        self._pgqueue_app = pgqueue_app
        self._flask_app = app
        dsn = app.config.get("PGQUEUE_DSN") or _sqlalchemy_dsn(app)
        own = pgqueue_app.has_own_dsn
        if dsn and (not own or _derived.get(pgqueue_app) == pgqueue_app.dsn):
            pgqueue_app.configure(dsn=dsn)
            _derived[pgqueue_app] = pgqueue_app.dsn
        if "PGQUEUE_NOTIFY" in app.config:
            pgqueue_app.configure(notify=bool(app.config["PGQUEUE_NOTIFY"]))
        if app.config.get("PGQUEUE_JOIN_SESSION", True):
            pgqueue_app.connection_provider = SessionTransactions(app)
        app.extensions[EXTENSION] = self
        app.cli.add_command(pgqueue_command)

    def task(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Register a task on the pgqueue App that runs inside this Flask app's context
        (so db.session, current_app and config work on the worker). Same options as
        App.task."""

        def register(f: Callable[..., Any]) -> Any:
            return self.pgqueue_app.task(**options)(self.in_app_context(f))

        return register(fn) if fn is not None else register

    def in_app_context(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Wrap fn to run in an app context of the Flask app this extension was given:
        the caller's, when it is already inside one of that app (a task run inline by
        pgqueue.testing.eager() in a request then shares the request's db.session, and
        sees its flushed rows), else a new one (on a worker)."""

        def flask_app() -> Flask:
            if self._flask_app is None:
                raise RuntimeError("PgQueue: init_app(app) was never called in this process")
            return self._flask_app

        def context() -> contextlib.AbstractContextManager[Any]:
            app = flask_app()
            if has_app_context() and current_app._get_current_object() is app:  # type: ignore[attr-defined]
                return contextlib.nullcontext()
            return app.app_context()

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with context():
                    return await fn(*args, **kwargs)

            return run_async

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with context():
                return fn(*args, **kwargs)

        return run


def get_app() -> App:
    """The pgqueue App of the current Flask app."""
    ext = current_app.extensions.get(EXTENSION)
    if not isinstance(ext, PgQueue):
        raise RuntimeError("this Flask app has no PgQueue extension: PgQueue(app) first")
    return ext.pgqueue_app


class SessionTransactions:
    """App.connection_provider: while db.session (Flask-SQLAlchemy) has a transaction open
    in this app context, its psycopg connection; else None (pgqueue's own pool)."""

    def __init__(self, app: Flask) -> None:
        self.app = app

    def __call__(self) -> psycopg.Connection[Any] | None:
        if not has_app_context() or current_app._get_current_object() is not self.app:  # type: ignore[attr-defined]
            return None
        db = self.app.extensions.get("sqlalchemy")
        if db is None:
            return None
        session = db.session()  # the scoped session of this app context
        if not session.in_transaction():
            return None
        raw = session.connection().connection.driver_connection
        return raw if isinstance(raw, psycopg.Connection) else None


def _sqlalchemy_dsn(app: Flask) -> str | None:
    """A libpq DSN from SQLALCHEMY_DATABASE_URI (postgresql+psycopg://... -> postgresql://)."""
    uri = app.config.get("SQLALCHEMY_DATABASE_URI")
    if not uri:
        return None
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    if url.get_backend_name() != "postgresql":
        raise ConfigError(
            f"pgqueue needs PostgreSQL, but SQLALCHEMY_DATABASE_URI is {url.get_backend_name()}: "
            "set PGQUEUE_DSN"
        )
    if url.get_driver_name() != "psycopg" and app.config.get("PGQUEUE_JOIN_SESSION", True):
        warnings.warn(
            f"SQLALCHEMY_DATABASE_URI uses the {url.get_driver_name()} driver: enqueue cannot "
            "join db.session's transactions. Use postgresql+psycopg:// (psycopg 3)",
            stacklevel=3,
        )
    dsn: str = url.set(drivername="postgresql").render_as_string(hide_password=False)
    return dsn


def _load(spec: str) -> App:
    from pgqueue.cli import load_app

    return load_app(spec)


@click.command(
    EXTENSION,
    context_settings={"ignore_unknown_options": True, "help_option_names": []},
    help="pgqueue's command line (worker, migrate, runs, queues...) for this app.",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@with_appcontext
def pgqueue_command(args: tuple[str, ...]) -> None:
    app = get_app()
    _cli.run(list(args) or ["--help"], app=app, dsn=app.dsn, prog_name="flask pgqueue")
