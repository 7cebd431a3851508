-- pgqueue 0012: pgqueue.steps.waited, what a step waited for, kept after the wait ends:
-- {"event", "key", "timeout"} (ctx.wait_for_event, with "timed_out": true when it gave up),
-- {"seconds"} (ctx.sleep), {"run_id"} (ctx.call's child). A step's output is replaced by
-- what the wait returned (the event's payload, the child's result), so without this the
-- dashboard and `runs show` could not say what a finished wait was for. NULL for steps
-- that never waited.
ALTER TABLE pgqueue.steps ADD COLUMN waited jsonb
    CONSTRAINT steps_waited_check CHECK (jsonb_typeof(waited) = 'object');
