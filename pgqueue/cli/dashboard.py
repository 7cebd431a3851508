"""`pgqueue dashboard`: the web dashboard (pgqueue.dashboard), served by uvicorn."""

from __future__ import annotations

import click

from pgqueue.cli._common import db_options, fail, open_app


@click.command()
@db_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option("--read-only", is_flag=True, help="Refuse every action (403).")
@click.option(
    "--token",
    envvar="PGQUEUE_DASHBOARD_TOKEN",
    help="Require this token (Bearer header or login form); needed off loopback. "
    "Default: $PGQUEUE_DASHBOARD_TOKEN.",
)
@click.option("--root-path", default="", help="URL prefix when behind a proxy (e.g. /pgqueue).")
def dashboard(
    dsn: str | None,
    embedded: bool,
    host: str,
    port: int,
    read_only: bool,
    token: str | None,
    root_path: str,
) -> None:
    """Serve the web dashboard (docs/dashboard.md)."""
    try:
        from pgqueue.dashboard import serve
    except ImportError as exc:
        fail(f"the dashboard needs {exc.name}: pip install 'pgqueue-jobs[dashboard]'")

    serve.check_bind(host, token)
    app = open_app(dsn, embedded)
    serve.run(app, host=host, port=port, read_only=read_only, token=token, root_path=root_path)
