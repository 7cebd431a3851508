"""Django's database connections on a pgqueue worker.

Django refreshes its connections around every request (`close_old_connections` on
request_started and request_finished): it drops those past CONN_MAX_AGE and those that
broke. A worker thread is no request, so the integration does the same around every sync
run it makes (task, workflow, on_success/on_failure hook), through App.sync_wrappers: a
task that uses the ORM never inherits a connection killed by a restart, a failover or an
idle timeout, and CONN_MAX_AGE applies to workers as it does to web processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import close_old_connections

from pgqueue.workflows.context import Context, SyncWrapper

R = TypeVar("R")


def refresh_connections(ctx: Context, call: Callable[[], R]) -> R:
    """An App sync wrapper: Django's request cycle around one run."""
    close_old_connections()
    try:
        return call()
    finally:
        close_old_connections()


def install(sync_wrappers: list[SyncWrapper]) -> None:
    """Refresh Django's connections around the sync runs of an App's workers (once):
    `sync_wrappers` is the App's."""
    if refresh_connections not in sync_wrappers:
        sync_wrappers.append(refresh_connections)
