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
    "Default: $PGQUEUE_DASHBOARD_TOKEN (prefer it: a command line is visible to `ps`).",
)
@click.option("--root-path", default="", help="URL prefix when behind a proxy (e.g. /pgqueue).")
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    envvar="PGQUEUE_DASHBOARD_ALLOWED_HOSTS",
    help="A name the Host header may carry, e.g. ops.example.com (any port) or "
    "ops.example.com:8443; repeat for more. The bound address (and for loopback "
    "127.0.0.1, localhost, [::1]) with --port is always allowed; any other Host gets 400. "
    "Default: $PGQUEUE_DASHBOARD_ALLOWED_HOSTS (space-separated).",
)
@click.option(
    "--forwarded-allow-ips",
    envvar="FORWARDED_ALLOW_IPS",
    default=None,
    help="Addresses of proxies whose X-Forwarded-Proto/-For are believed (comma-separated, "
    "or *). Default: $FORWARDED_ALLOW_IPS, else 127.0.0.1.",
)
def dashboard(
    dsn: str | None,
    embedded: bool,
    host: str,
    port: int,
    read_only: bool,
    token: str | None,
    root_path: str,
    allowed_hosts: tuple[str, ...],
    forwarded_allow_ips: str | None,
) -> None:
    """Serve the web dashboard (docs/dashboard.md)."""
    try:
        from pgqueue.dashboard import serve
        from pgqueue.dashboard.hosts import Hosts
    except ImportError as exc:
        fail(f"the dashboard needs {exc.name}: pip install 'pgqueue-jobs[dashboard]'")

    serve.check_bind(host, token)
    Hosts.parse(allowed_hosts)  # a bad name: one line, exit 2, before connecting
    app = open_app(dsn, embedded)
    serve.run(
        app,
        host=host,
        port=port,
        read_only=read_only,
        token=token,
        root_path=root_path,
        allowed_hosts=allowed_hosts,
        forwarded_allow_ips=forwarded_allow_ips,
    )
