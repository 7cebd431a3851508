"""A traced app for tests/contrib/test_otel.py: its spans go to the JSON-lines file named by
$PGQUEUE_TEST_SPANS (the worker process's exporter), or to whatever exporter a test
installs in-process."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import pgqueue
from pgqueue.contrib.otel import instrument

app = pgqueue.App()
provider = TracerProvider()
tracer = provider.get_tracer("tests.apps.traced")


class JsonLinesExporter(SpanExporter):
    """One JSON object per finished span, appended to a file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                out.write(json.dumps(json.loads(span.to_json())) + "\n")
        return SpanExportResult.SUCCESS


if os.environ.get("PGQUEUE_TEST_SPANS"):
    provider.add_span_processor(
        SimpleSpanProcessor(JsonLinesExporter(os.environ["PGQUEUE_TEST_SPANS"]))
    )
instrument(app, tracer_provider=provider)


@app.task(name="traced.work")
def work(n: int) -> int:
    with tracer.start_as_current_span("inside work"):
        return n * 2


@app.task(name="traced.fail", max_attempts=1)
def fail() -> None:
    raise ValueError("no good")


@app.task(name="traced.hooked", on_success=lambda ctx, result: None)
def hooked(n: int) -> int:
    """A sync task with a hook: its attempt is awaited on the loop, its call in a thread."""
    with tracer.start_as_current_span("inside hooked"):
        return n


@app.task(name="traced.async_work")
async def async_work(n: int) -> int:
    with tracer.start_as_current_span("inside async_work"):
        return n + 1


@app.task(name="traced.spawner")
def spawner() -> int:
    """Enqueues a run from inside an attempt: that enqueue joins the attempt's trace."""
    return work.enqueue(21).id
