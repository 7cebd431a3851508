"""App as a facade (pgqueue.app): its public members, each call the same call of one of its
parts, and its settings read and written through them. No database: an App does not
connect until it is used."""

from __future__ import annotations

import inspect

import pgqueue
from pgqueue.app import App

# What an App offers: the public API of the README and docs, unchanged by the split into
# parts (database, enqueuer, registry, operator).
PUBLIC = {
    *("aclose", "async_connection", "batch", "caller_connection", "cancel", "cancel_where"),
    *("check_schema", "close", "close_async_pool", "configure", "connection"),
    *("connection_provider", "count_where", "database", "default_queue", "dsn", "dsn_source"),
    *("embedded", "emit_event", "enqueue", "enqueue_by_name", "enqueue_deferrer", "enqueuer"),
    *("get_batch", "get_run", "get_run_async", "get_task", "group_weights", "groups"),
    *("has_own_dsn", "set_group_weights"),
    *("insert_now", "insert_runs", "insert_runs_async", "list_runs", "list_schedules"),
    *("list_workers", "listens", "make_context", "max_json_depth", "max_payload_bytes"),
    *("migrate", "notify", "operator", "pause_schedule", "periodic", "pool_size", "pooler"),
    *("prune", "purge_queue", "queue", "queue_summary", "queues", "registry"),
    *("resume_schedule", "retry", "retry_where", "run_errors", "run_steps", "schedule"),
    *("schedules", "served_queues", "set_limits", "set_paused", "sync_wrappers", "task"),
    *("lift_group_backoff", "run_backoffs", "set_priority_aging"),
    *("tasks", "tracing", "trigger_schedule", "worker", "workflow", "wrap_sync"),
}


def make_app() -> pgqueue.App:
    return pgqueue.App("postgresql://nobody@127.0.0.1:1/none", pool_size=3)


def test_an_app_offers_its_public_api() -> None:
    app = make_app()
    found = {name for name in {*dir(App), *vars(app)} if not name.startswith("_")}
    assert found == PUBLIC


def test_each_call_is_the_call_of_one_part_with_its_signature() -> None:
    app = make_app()
    parts = {"database": app.database, "enqueuer": app.enqueuer}
    parts |= {"registry": app.registry, "operator": app.operator}
    delegated = 0
    for name in sorted(PUBLIC):
        for part in parts.values():
            method = getattr(type(part), name, None)
            if callable(method) and not isinstance(method, property):
                call = getattr(app, name)
                assert inspect.signature(call) == inspect.signature(getattr(part, name)), name
                assert call.__doc__ == method.__doc__, name
                delegated += 1
    assert delegated >= 40


def test_settings_are_read_and_written_through_the_parts() -> None:
    app = make_app()
    assert app.pool_size == app.database.pool_size == 3
    app.pool_size = 7  # as a worker does for its workflows' steps
    assert app.database.pool_size == 7
    provider = lambda: None  # noqa: E731
    app.connection_provider = provider
    assert app.database.connection_provider is provider
    app.tracing = None
    assert app.enqueuer.tracing is None
    assert app.tasks is app.registry.tasks and app.queues is app.registry.queues


def test_a_task_writes_through_the_apps_enqueuer() -> None:
    app = make_app()

    @app.task
    def double(x: int) -> int:
        return 2 * x

    assert double.enqueuer is app.enqueuer
    assert app.get_task(double.name) is double
    assert app.served_queues() == ["default"]


def test_a_handle_made_from_an_app_holds_its_database() -> None:
    app = make_app()
    assert pgqueue.RunHandle(1, app).database is app.database  # type: ignore[arg-type]
