"""A worker's default concurrency: 100 when every task of the app is async, else 10; an
explicit concurrency always wins, from Python and from the CLI (Django's and Flask's
commands: tests/contrib/django/test_django.py, tests/contrib/test_flask.py)."""

from __future__ import annotations

from typing import Any

import pytest

import pgqueue
from pgqueue.worker import ASYNC_CONCURRENCY, SYNC_CONCURRENCY, Worker
from tests.cli.helpers import cli


def worker(app: pgqueue.App, **options: Any) -> Worker:
    return app.worker(install_signal_handlers=False, **options)


def test_async_only_tasks_get_the_async_default(app: pgqueue.App) -> None:
    @app.task(queue="a")
    async def one() -> None: ...

    @app.task(queue="b")
    async def two() -> None: ...

    w = worker(app)
    assert ASYNC_CONCURRENCY == 100
    assert w.concurrency == 100
    assert Worker(app, install_signal_handlers=False).concurrency == 100
    # the parts are built with it once the worker runs
    w.run(burst=True)
    assert w.producer.concurrency == 100 and w.executor.threads.size == 100


def test_one_sync_task_or_workflow_keeps_the_sync_default(app: pgqueue.App) -> None:
    @app.task(queue="a")
    async def fast() -> None: ...

    assert worker(app).concurrency == ASYNC_CONCURRENCY

    @app.task(queue="b")
    def slow() -> None: ...

    assert SYNC_CONCURRENCY == 10
    assert worker(app).concurrency == 10
    # a worker of queue a too: a run of slow may be routed there (.options(queue="a"))
    assert worker(app, queues=["a"]).concurrency == 10


def test_a_workflow_counts_as_sync(app: pgqueue.App) -> None:
    @app.task(queue="a")
    async def fast() -> None: ...

    @app.workflow(queue="a")
    def flow(ctx: pgqueue.Context) -> None: ...

    assert worker(app, queues=["a"]).concurrency == 10


def test_runs_routed_to_a_queue_no_task_declares_get_the_default_of_the_app(
    app: pgqueue.App,
) -> None:
    """The user's case of issue 42: `app.worker(queues=[q])` with no options, serving a
    queue that runs were routed to with .options(queue=q): every task of the app decides."""

    @app.task(queue="a")
    async def fast() -> None: ...

    @app.task
    async def other() -> None: ...

    fast.options(queue="routed").enqueue()
    w = worker(app, queues=["routed"])
    assert w.concurrency == 100
    w.run(burst=True)
    assert w.stats["succeeded"] == 1 and w.producer.concurrency == 100

    @app.task(queue="b")
    def slow() -> None: ...

    assert worker(app, queues=["routed"]).concurrency == 10
    # an app with no task at all keeps the sync default
    assert worker(pgqueue.App(app.dsn)).concurrency == 10


def test_an_explicit_concurrency_wins(app: pgqueue.App) -> None:
    @app.task(queue="a")
    async def fast() -> None: ...

    assert worker(app, concurrency=3).concurrency == 3
    with pytest.raises(ValueError, match="concurrency"):
        worker(app, concurrency=0)

    @app.task(queue="b")
    def slow() -> None: ...

    assert worker(app, concurrency=50).concurrency == 50


@pytest.mark.parametrize(("options", "expected"), [((), [100]), (("--concurrency", "7"), [7])])
def test_the_cli_worker_registers_the_default(
    capsys: Any, dsn: str, app: pgqueue.App, options: tuple[str, ...], expected: list[int]
) -> None:
    seen = app.enqueue_by_name("registered_concurrency")
    base = ["worker", "--dsn", dsn, "--app", "tests.apps.asynconly:app", "--burst"]
    code, _, err = cli(capsys, *base, *options)
    assert code == 0, err
    assert app.get_run(seen.id).result == expected
