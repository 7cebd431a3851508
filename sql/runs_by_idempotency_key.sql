-- Runs that already hold some idempotency keys (the enqueue skipped them).
SELECT id, idempotency_key
FROM pgqueue.runs
WHERE idempotency_key = ANY(%(keys)s::text[])
