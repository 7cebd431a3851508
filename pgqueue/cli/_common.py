"""What every command shares: the --dsn/--embedded/--json options, opening the App, printing
tables and JSON, and user errors (one line on stderr, exit 2; see pgqueue.cli.main)."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from pgqueue.app import App
from pgqueue.db import connect as db
from pgqueue.errors import UserError
from pgqueue.ops import audit as _audit
from pgqueue.runs.terminal import printable

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str) -> None:
    raise UserError(message)


def db_options(fn: F) -> F:
    """--dsn and --embedded, on every command."""
    fn = click.option(
        "--embedded",
        is_flag=True,
        help="Use the shared local embedded PostgreSQL (started if needed).",
    )(fn)
    fn = click.option(
        "--dsn",
        default=None,
        help="PostgreSQL DSN (default: the App's own dsn, else $PGQUEUE_DSN).",
    )(fn)
    return fn


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def resolve_dsn(dsn: str | None, embedded: bool) -> str:
    """--dsn > --embedded > $PGQUEUE_DSN (an App's own dsn is applied by open_app)."""
    if dsn and embedded:
        fail("give either --dsn or --embedded, not both")
    if embedded:
        from pgqueue.db import embedded as emb

        return emb.ensure_server()
    return db.resolve_dsn(dsn)


def load_app(spec: str) -> App:
    """Import MODULE:ATTR (the current directory is importable, as with uvicorn)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        fail(f"--app must look like MODULE:ATTR (e.g. myproject.tasks:app), not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        fail(f"cannot import {module_name!r} (from --app {spec}): {exc}")
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        fail(f"{spec}: {attr!r} in {module_name} is not a pgqueue.App (found {type(app).__name__})")
    assert isinstance(app, App)
    return app


def open_app(
    dsn: str | None, embedded: bool, spec: str | None = None, pooler: str | None = None
) -> App:
    app = load_app(spec) if spec else App()
    if dsn or embedded or not app.has_own_dsn:
        target = resolve_dsn(dsn, embedded)
        # An App that follows a framework's settings (dsn_source) keeps following them
        # when the target is what they say (the default of `manage.py pgqueue ...`).
        if app.has_own_dsn or app.dsn_source is None or target != app.dsn:
            app.configure(dsn=target)
    if pooler is not None:
        app.configure(pooler=pooler)
    # Close the pool when the command ends (it reopens if the App is used again): a pool
    # left to the garbage collector may be collected in one of its own threads, which
    # psycopg_pool reports as "cannot join current thread" (seen under Django's
    # call_command, where the process lives on).
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(app.close)
    app.check_schema()
    return app


def recorded(
    app: App,
    action: str,
    *,
    run_id: int | None = None,
    target: dict[str, Any] | None = None,
    count: int = 1,
    reason: str | None = None,
) -> None:
    """A state-changing command's action in the audit log the dashboard shows
    (pgqueue.ops.audit), as "cli", under the dashboard's name for the same action."""
    with app.connection() as conn:
        _audit.record(
            conn, _audit.CLI, action, run_id=run_id, target=target, count=count, reason=reason
        )


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    if not rows:
        click.echo("(none)")
        return
    cells = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    header = "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))
    click.echo(header.rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return when(value)
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        text = ",".join(printable(v) for v in value)  # queues: as `pgqueue stats` prints them
        return text if len(text) <= 40 else text[:37] + "..."
    if isinstance(value, (list, dict)):
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:37] + "..."
    text = printable(str(value))
    return text if len(text) <= 60 else text[:57] + "..."


def when(value: datetime) -> str:
    """A time as every command prints it: in UTC, and saying so."""
    if value.tzinfo is not None:
        with contextlib.suppress(OverflowError):  # datetime.max/min stand for out of range
            value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def parse_json(option: str, text: str | None, kind: type) -> Any:
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{option} is not valid JSON ({exc.msg} at position {exc.pos}): {text!r}")
    except RecursionError:
        fail(f"{option} nests too deeply to parse: flatten it")
    if not isinstance(value, kind):
        want = (
            "a JSON array, e.g. '[1, \"a\"]'"
            if kind is list
            else 'a JSON object, e.g. \'{"to": "a@b.c"}\''
        )
        fail(f"{option} must be {want}")
    return value
