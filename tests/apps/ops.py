"""Tasks and schedules for the schedules and operations tests' worker processes."""

from __future__ import annotations

import pgqueue

app = pgqueue.App()

FAST = pgqueue.RetryPolicy(base=0.05, jitter=0)


# catch_up: on a loaded CI machine a scheduler that wakes more than a second late must not
# turn into a gap in test_three_worker_processes_one_run_per_tick.
@app.periodic(cron="* * * * * *", name="every-second", catch_up=True)
@app.task(name="ops.tick")
def tick() -> str:
    return "tick"


@app.task(name="ops.ok")
def ok(n: int = 0) -> int:
    return n


@app.task(name="ops.boom", max_attempts=2, retry=FAST)
def boom() -> None:
    raise RuntimeError("boom")
