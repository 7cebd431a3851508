-- pgqueue 0011: pgqueue.runs.headers, message headers stored with a run at enqueue. The
-- OpenTelemetry integration (pgqueue.contrib.otel) keeps the W3C trace context there
-- ({"traceparent": ..., "tracestate": ...}), so that each attempt's span joins the
-- enqueuer's trace. NULL when nothing is traced: a NULL costs a bit in the row's null
-- bitmap and nothing else.
ALTER TABLE pgqueue.runs ADD COLUMN headers jsonb
    CONSTRAINT runs_headers_check CHECK (jsonb_typeof(headers) = 'object');
