"""Tasks for bench/features.py (limits and workflows): `--app bench.feature_apps:app`.

One async no-op task serves the three semaphore queues (the loader writes rows of
`feat.anoop` straight into each queue); a sync no-op task and a 4-step no-op workflow
serve the workflow comparison. The limits are declared in code, so every worker writes
them to pgqueue.queues when it starts.
"""

from __future__ import annotations

import os

import pgqueue

# FEAT_POOL_SIZE: the App's pool (workflow steps write through it); pgqueue's default is 4
app = pgqueue.App(pool_size=int(os.environ.get("FEAT_POOL_SIZE", "4")))

FREE_QUEUE = "feat_free"  # no limits: the lock-free claim.sql
LIMITED_QUEUE = "feat_limited"  # concurrency 50: claim_limited
HIGH_LIMIT_QUEUE = "feat_limited_hi"  # concurrency 1000: never binds for 50-100 slots
GROUPS_QUEUE = "feat_groups"  # group_concurrency 1: claim_limited
RATED_QUEUE = "feat_rated"  # a rate limit never reached: claim_rated.sql (bench/rates.py)
WEIGHTED_QUEUE = "feat_weighted"  # HIGH_LIMIT_QUEUE with group weights (bench/rates.py)
AGING_QUEUE = "feat_aging"  # priority aging: claim.sql, and the aging pass (bench/rates.py)
TASK_QUEUE = "feat_task"
WORKFLOW_QUEUE = "feat_wf"

QUEUE_LIMIT = 50
HIGH_LIMIT = 1000
GROUP_LIMIT = 1
RATE_LIMIT = "1000000/s"
AGING = 1.0  # seconds per step: every queued run moves at every pass of the drain

app.queue(LIMITED_QUEUE, concurrency=QUEUE_LIMIT)
app.queue(HIGH_LIMIT_QUEUE, concurrency=HIGH_LIMIT)
app.queue(GROUPS_QUEUE, group_concurrency=GROUP_LIMIT)
app.queue(RATED_QUEUE, rate_limit=RATE_LIMIT)
# the groups bench.features.load(..., groups=3) writes, weighted 3:2:1
WEIGHTS = {"g0000": 3, "g0001": 2, "g0002": 1}
app.queue(WEIGHTED_QUEUE, concurrency=HIGH_LIMIT, group_weights=WEIGHTS)
app.queue(AGING_QUEUE, priority_aging=AGING)

STEPS = 4


@app.task(name="feat.anoop", queue=FREE_QUEUE)
async def anoop(i: int = 0) -> None:
    """An async no-op (also loaded into the limited queues by the benchmark)."""


@app.task(name="feat.noop", queue=TASK_QUEUE)
def noop(i: int = 0) -> None:
    """A sync no-op: the baseline of the workflow (workflows run in worker threads)."""


def nothing(i: int) -> int:
    """The body of every workflow step."""
    return i


@app.workflow(name="feat.wf4", queue=WORKFLOW_QUEUE)
def wf4(ctx: pgqueue.Context, i: int = 0) -> int:
    """Four no-op steps: one step write each, plus the steps read once per execution."""
    total = 0
    for n in range(STEPS):
        total += ctx.step(f"s{n}", nothing, i)
    return total
