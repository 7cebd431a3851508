"""Log records made while a run executes carry its id, task, queue and attempt (the
worker's LogRecord factory, pgqueue._logging.install_run_fields)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

import pgqueue
from pgqueue._logging import RUN_FIELDS, JsonFormatter
from pgqueue.tasks.retry import RetryPolicy
from tests.helpers import InProcessWorker

log = logging.getLogger("tests.log_fields")


class Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[list[logging.LogRecord]]:
    handler = Keep()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield handler.records
    log.removeHandler(handler)


def fields(record: logging.LogRecord) -> dict[str, object]:
    return {name: getattr(record, name) for name in RUN_FIELDS if hasattr(record, name)}


def test_sync_and_async_tasks_log_records_carry_the_run(
    app: pgqueue.App, kept: list[logging.LogRecord]
) -> None:
    @app.task(queue="mail", max_attempts=2, retry=RetryPolicy(base=0.01, jitter=0))
    def send(to: str) -> None:
        log.info("sending to %s", to)
        if pgqueue.current().attempt == 1:
            raise ConnectionError("smtp down")

    @app.task()
    async def tally() -> None:
        log.info("tallying")

    sent, tallied = send.enqueue("ann@example.com"), tally.enqueue()
    with InProcessWorker(app, queues=["mail", "default"], stage_interval=0.05):
        sent.wait(timeout=20)
        tallied.wait(timeout=20)
    log.info("after the runs")

    by_message = {(r.getMessage(), fields(r).get("pgqueue_attempt")): r for r in kept}
    for attempt in (1, 2):
        record = by_message[("sending to ann@example.com", attempt)]
        assert fields(record) == {
            "pgqueue_run_id": sent.id,
            "pgqueue_task": send.name,
            "pgqueue_queue": "mail",
            "pgqueue_attempt": attempt,
        }
    assert fields(by_message[("tallying", 1)]) == {
        "pgqueue_run_id": tallied.id,
        "pgqueue_task": tally.name,
        "pgqueue_queue": "default",
        "pgqueue_attempt": 1,
    }
    # outside a run: none of them, even in the worker's process
    assert fields(by_message[("after the runs", None)]) == {}


def test_the_json_log_format_shows_them(app: pgqueue.App, kept: list[logging.LogRecord]) -> None:
    @app.task()
    def hello() -> None:
        log.info("hello")

    handle = hello.enqueue()
    with InProcessWorker(app):
        handle.wait(timeout=20)
    [record] = [r for r in kept if r.getMessage() == "hello"]
    line = json.loads(JsonFormatter().format(record))
    assert line["pgqueue_run_id"] == handle.id and line["pgqueue_task"] == hello.name
