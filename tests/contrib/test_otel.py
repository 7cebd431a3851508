"""Tracing (pgqueue.contrib.otel): an enqueue's span and each attempt's span share one
trace through the W3C context stored in pgqueue.runs.headers, in-process and across a real
worker process; failures are recorded; an untraced app stores nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import pgqueue
from tests.apps import traced
from tests.helpers import InProcessWorker, WorkerProcess


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    traced.provider.add_span_processor(processor)
    yield exporter
    processor.shutdown()  # the exporter stops taking spans
    exporter.clear()


@pytest.fixture
def app(dsn: str) -> Iterator[pgqueue.App]:
    traced.app.configure(dsn=dsn)
    yield traced.app
    traced.app.close()


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {s.name: s for s in exporter.get_finished_spans()}


def headers_of(conn: psycopg.Connection[Any], run_id: int) -> Any:
    row = conn.execute("SELECT headers FROM pgqueue.runs WHERE id = %s", (run_id,)).fetchone()
    return row[0] if row else None


def test_enqueue_stores_the_trace_context_of_its_producer_span(
    app: pgqueue.App, spans: InMemorySpanExporter, conn: psycopg.Connection[Any]
) -> None:
    handle = traced.work.enqueue(4)
    span = by_name(spans)["pgqueue.enqueue traced.work"]
    assert span.kind == SpanKind.PRODUCER
    assert span.attributes is not None
    assert span.attributes["messaging.system"] == "pgqueue"
    assert span.attributes["messaging.destination.name"] == "default"
    assert span.attributes["pgqueue.run_id"] == handle.id
    ctx = span.get_span_context()
    assert ctx is not None
    traceparent = headers_of(conn, handle.id)["traceparent"]
    assert traceparent.startswith(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-")
    # a batch: one span, one context for all its runs
    many = traced.work.enqueue_many([(1,), (2,), (3,)])
    assert len({json.dumps(headers_of(conn, h.id)) for h in many}) == 1


def test_attempts_run_in_consumer_spans_under_the_enqueue_in_process(
    app: pgqueue.App, spans: InMemorySpanExporter
) -> None:
    handles = [
        traced.work.enqueue(4),
        traced.hooked.enqueue(5),
        traced.async_work.enqueue(6),
        traced.fail.enqueue(),
    ]
    with InProcessWorker(app):
        for h in handles[:3]:
            h.wait(timeout=20)
        with pytest.raises(pgqueue.RunFailed):
            handles[3].wait(timeout=20)
    found = by_name(spans)
    for task, inner in (
        ("traced.work", "inside work"),
        ("traced.hooked", "inside hooked"),
        ("traced.async_work", "inside async_work"),
    ):
        enqueue, run = found[f"pgqueue.enqueue {task}"], found[f"pgqueue.run {task}"]
        assert run.kind == SpanKind.CONSUMER
        assert run.parent is not None and enqueue.context is not None
        assert run.parent.span_id == enqueue.context.span_id
        assert run.context is not None and run.context.trace_id == enqueue.context.trace_id
        assert run.attributes is not None and run.attributes["pgqueue.attempt"] == 1
        assert run.attributes["pgqueue.outcome"] == "succeeded"
        # the task's own span is a child of its attempt's span, whatever thread ran it
        assert found[inner].parent is not None
        assert found[inner].parent.span_id == run.context.span_id
    failed = found["pgqueue.run traced.fail"]
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.status.description == "ValueError: no good"
    event = next(e for e in failed.events if e.name == "exception")
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert "raise ValueError" in str(event.attributes["exception.stacktrace"])


def test_a_run_enqueued_by_a_task_joins_the_attempts_trace(
    app: pgqueue.App, spans: InMemorySpanExporter
) -> None:
    handle = traced.spawner.enqueue()
    with InProcessWorker(app):
        child_id = handle.wait(timeout=20)
        pgqueue.RunHandle(child_id, app).wait(timeout=20)
    found = spans.get_finished_spans()
    attempt = next(s for s in found if s.name == "pgqueue.run traced.spawner")
    inner = [s for s in found if s.name == "pgqueue.enqueue traced.work"]
    assert len(inner) == 1 and inner[0].parent is not None and attempt.context is not None
    assert inner[0].parent.span_id == attempt.context.span_id
    child_run = next(s for s in found if s.name == "pgqueue.run traced.work")
    assert child_run.context is not None
    assert child_run.context.trace_id == attempt.context.trace_id


def test_spans_cross_a_real_worker_process(
    app: pgqueue.App, spans: InMemorySpanExporter, dsn: str, tmp_path: Path
) -> None:
    """The producer (this process) exports its enqueue span in memory; the worker process
    exports its attempt spans to a file: they are one trace, parent and child."""
    out = tmp_path / "spans.jsonl"
    handle = traced.work.enqueue(10)
    enqueue = by_name(spans)["pgqueue.enqueue traced.work"]
    env = {"PGQUEUE_TEST_SPANS": str(out)}
    with WorkerProcess(dsn, "tests.apps.traced:app", "--burst", env=env) as worker:
        assert worker.wait(60) == 0, worker.output()
    assert handle.wait(timeout=5) == 20
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    run = next(s for s in exported if s["name"] == "pgqueue.run traced.work")
    inner = next(s for s in exported if s["name"] == "inside work")
    assert enqueue.context is not None
    assert run["context"]["trace_id"] == f"0x{enqueue.context.trace_id:032x}"
    assert run["parent_id"] == f"0x{enqueue.context.span_id:016x}"
    assert run["kind"] == "SpanKind.CONSUMER"
    assert run["attributes"]["pgqueue.run_id"] == handle.id
    assert inner["parent_id"] == run["context"]["span_id"]


def test_an_untraced_app_stores_no_headers(dsn: str, conn: psycopg.Connection[Any]) -> None:
    plain = pgqueue.App(dsn)
    try:
        run_id = plain.enqueue_by_name("anything", [1]).id
        assert plain.tracing is None
    finally:
        plain.close()
    assert headers_of(conn, run_id) is None


def test_async_enqueues_are_traced_too(
    app: pgqueue.App, spans: InMemorySpanExporter, conn: psycopg.Connection[Any]
) -> None:
    """enqueue_async of one run (which GroupCommit would otherwise batch with other
    callers' runs) and enqueue_many_async each store their own span's context."""

    async def enqueue() -> list[int]:
        one = await traced.work.enqueue_async(1)
        many = await traced.work.enqueue_many_async([(2,), (3,)])
        await app.aclose()
        return [one.id, *(h.id for h in many)]

    ids = asyncio.run(enqueue())
    produced = [s for s in spans.get_finished_spans() if s.name == "pgqueue.enqueue traced.work"]
    assert len(produced) == 2
    contexts = {f"{s.context.span_id:016x}" for s in produced if s.context is not None}
    stored = {headers_of(conn, i)["traceparent"].split("-")[2] for i in ids}
    assert stored == contexts
