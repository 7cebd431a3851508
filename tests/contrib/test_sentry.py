"""Error reporting to Sentry (pgqueue.contrib.sentry), through the real sentry-sdk with a
transport that keeps its events in memory."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

import pgqueue
from pgqueue.contrib import sentry as pgqueue_sentry
from pgqueue.tasks.retry import RetryPolicy
from tests.helpers import InProcessWorker, wait_until


class Captured(Transport):
    """Keeps every event sentry-sdk would send."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        for item in envelope.items:
            if item.type == "event" and item.payload.json is not None:
                self.events.append(item.payload.json)


@pytest.fixture
def events() -> Iterator[list[dict[str, Any]]]:
    transport = Captured()
    sentry_sdk.init(
        dsn="https://public@sentry.invalid/1", transport=transport, default_integrations=False
    )
    try:
        yield transport.events
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.get_global_scope().set_client(None)


def test_each_failed_attempt_is_one_event_with_tags_and_traceback(
    app: pgqueue.App, events: list[dict[str, Any]]
) -> None:
    pgqueue_sentry.instrument(app)

    @app.task(max_attempts=2, retry=RetryPolicy(base=0.01, jitter=0))
    def charge(order: int) -> None:
        raise ConnectionError(f"gateway down for order {order}")

    @app.task()
    def fine() -> int:
        return 1

    handle = charge.enqueue(7)
    done = fine.enqueue()
    with InProcessWorker(app, stage_interval=0.05):
        with pytest.raises(pgqueue.RunFailed):
            handle.wait(timeout=20)
        assert done.wait(timeout=20) == 1
    wait_until(lambda: len(events) >= 2, message="two events")
    assert len(events) == 2, events
    for attempt, (event, state) in enumerate(
        zip(events, ["scheduled", "failed"], strict=True), start=1
    ):
        assert event["tags"]["pgqueue.run_id"] == str(handle.id)
        assert event["tags"]["pgqueue.task"] == charge.name
        assert event["tags"]["pgqueue.queue"] == "default"
        assert event["tags"]["pgqueue.attempt"] == str(attempt)
        assert event["tags"]["pgqueue.state"] == state
        [exception] = event["exception"]["values"]
        assert exception["type"] == "ConnectionError"
        assert exception["value"] == "gateway down for order 7"
        frames = exception["stacktrace"]["frames"]
        assert frames[-1]["function"] == "charge"


def test_an_async_task_s_non_retryable_error_is_reported_once(
    app: pgqueue.App, events: list[dict[str, Any]]
) -> None:
    pgqueue_sentry.instrument(app)

    @app.task(max_attempts=5)
    async def refund() -> None:
        raise pgqueue.NonRetryable("card declined")

    handle = refund.enqueue()
    with InProcessWorker(app), pytest.raises(pgqueue.RunFailed):
        handle.wait(timeout=20)
    wait_until(lambda: events, message="an event")
    [event] = events
    assert event["tags"]["pgqueue.error_kind"] == "non_retryable"
    assert event["tags"]["pgqueue.state"] == "failed"
    assert event["exception"]["values"][0]["type"] == "NonRetryable"
    assert event["contexts"]["pgqueue"]["max_attempts"] == 5


def test_uninstrument_stops_reporting(app: pgqueue.App, events: list[dict[str, Any]]) -> None:
    pgqueue_sentry.instrument(app)
    pgqueue_sentry.instrument(app)  # twice: still one report per failure
    pgqueue_sentry.uninstrument(app)
    assert app.tracing is None

    @app.task(max_attempts=1)
    def boom() -> None:
        raise RuntimeError("boom")

    handle = boom.enqueue()
    with InProcessWorker(app), pytest.raises(pgqueue.RunFailed):
        handle.wait(timeout=20)
    assert events == []


def test_with_opentelemetry_both_trace_and_report(dsn: str, events: list[dict[str, Any]]) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.apps import traced

    spans = InMemorySpanExporter()
    processor = SimpleSpanProcessor(spans)
    traced.provider.add_span_processor(processor)
    traced.app.configure(dsn=dsn)
    otel = traced.app.tracing
    pgqueue_sentry.instrument(traced.app)
    try:
        handle = traced.fail.enqueue()
        with InProcessWorker(traced.app), pytest.raises(pgqueue.RunFailed):
            handle.wait(timeout=20)
        wait_until(lambda: events, message="an event")
        assert events[0]["tags"]["pgqueue.task"] == "traced.fail"
        names = [s.name for s in spans.get_finished_spans()]
        assert "pgqueue.run traced.fail" in names and "pgqueue.enqueue traced.fail" in names
    finally:
        pgqueue_sentry.uninstrument(traced.app)
        assert traced.app.tracing is otel
        processor.shutdown()
        traced.app.close()


def test_attempts_past_their_timeout_are_reported(
    app: pgqueue.App, events: list[dict[str, Any]]
) -> None:
    """A sync task in its thread and an async one on the loop: the worker writes the
    timeout's failure apart from the attempt, and reports it."""
    pgqueue_sentry.instrument(app)

    @app.task(max_attempts=1, timeout=0.3)
    def slow_sync() -> None:
        pgqueue.current().wait_cancelled(20)

    @app.task(max_attempts=1, timeout=0.3)
    async def slow_async() -> None:
        await asyncio.sleep(20)

    handles = [slow_sync.enqueue(), slow_async.enqueue()]
    with InProcessWorker(app):
        for handle in handles:
            with pytest.raises(pgqueue.RunFailed):
                handle.wait(timeout=20)
    wait_until(lambda: len(events) >= 2, message="two events")
    assert len(events) == 2, events
    tasks = sorted(e["tags"]["pgqueue.task"] for e in events)
    assert tasks == sorted([slow_sync.name, slow_async.name])
    for event in events:
        assert event["tags"]["pgqueue.error_kind"] == "timeout"
        assert event["exception"]["values"][0]["type"] == "AttemptTimeout"
