"""`pgqueue demo`: a batch of real runs through a real worker, then inspection."""

from __future__ import annotations

import hashlib
import logging
import random
import shlex
import statistics
import threading
import time
from typing import Any

import click

from pgqueue.app import App
from pgqueue.db import connect as db
from pgqueue.db import sql as _sql
from pgqueue.errors import RetryAfter
from pgqueue.runs.handle import RunHandle
from pgqueue.tasks.retry import RetryPolicy
from pgqueue.workflows.context import Context, current

app = App(default_queue="demo")


@app.task(name="demo.thumbnail")
def thumbnail(image_id: int) -> dict[str, Any]:
    """Pretend to resize an image: a little CPU and a little waiting."""
    time.sleep(random.uniform(0.002, 0.02))
    digest = hashlib.sha256(str(image_id).encode()).hexdigest()[:12]
    return {"image": image_id, "thumb": f"thumbs/{digest}.webp"}


@app.task(name="demo.flaky_api", max_attempts=4, retry=RetryPolicy(base=0.2, max_delay=1))
def flaky_api(call_id: int) -> str:
    """Fails now and then, to show retries with backoff; never on its last attempt, so
    that every run of the demo ends succeeded."""
    ctx = current()
    if ctx.attempt < ctx.max_attempts and random.random() < 0.25:
        raise ConnectionError(f"upstream timeout on call {call_id}")
    return "ok"


@app.task(name="demo.rate_limited")
async def rate_limited(n: int) -> int:
    """An async task that asks to be retried later once, without using an attempt."""
    if n % 10 == 0 and random.random() < 0.5:
        raise RetryAfter(0.3, "rate limited")
    return n * n


def _create_profile(user_id: int) -> dict[str, Any]:
    return {"user": user_id, "plan": "free"}


@app.workflow(name="demo.onboarding")
def onboarding(ctx: Context, user_id: int) -> dict[str, Any]:
    """A workflow: a memoized step, a durable sleep, and a child run it waits for."""
    profile = ctx.step("create_profile", _create_profile, user_id)
    ctx.sleep("grace_period", 0.5)
    avatar = ctx.call("avatar", thumbnail, 10_000 + user_id)
    return {"user": profile["user"], "avatar": avatar["thumb"]}


WORKFLOWS = 5  # onboarding runs (each also calls one child thumbnail run)

SQL_EXAMPLES = """\
  -- what is in each queue?
  SELECT queue, state, count(*) FROM pgqueue.runs GROUP BY 1, 2 ORDER BY 1, 2;
  -- what failed, and why?
  SELECT r.id, r.task, e.attempt, e.kind, e.message
    FROM pgqueue.run_errors e JOIN pgqueue.runs r ON r.id = e.run_id
   ORDER BY e.id DESC LIMIT 5;
  -- enqueue from SQL (a trigger can do this too), into the demo's queue
  SELECT pgqueue.enqueue('demo.thumbnail', '[42]', queue => 'demo');
then run what is queued there (the demo's worker has stopped) and exit:
  pgqueue worker --app pgqueue.demo:app --queues demo --burst --dsn {dsn}"""


def run(dsn: str | None, count: int) -> None:
    logging.basicConfig(level=logging.ERROR)
    if dsn:
        dsn = db.check_dsn(dsn)
    else:
        from pgqueue.db import embedded

        dsn = embedded.ensure_server()
    app.configure(dsn=dsn)
    db.connect(dsn).close()
    app.migrate()

    side = max(1, count // 4)  # runs of flaky_api and of rate_limited each
    total = count + 2 * side + WORKFLOWS
    click.echo(
        f"enqueueing {total} runs ({count} thumbnail, {side} flaky_api, {side} rate_limited, "
        f"{WORKFLOWS} onboarding workflows), one round trip per task ..."
    )
    t0 = time.perf_counter()
    handles: list[RunHandle[Any]] = thumbnail.enqueue_many([(i,) for i in range(count)])
    handles += flaky_api.enqueue_many([(i,) for i in range(side)])
    handles += rate_limited.enqueue_many([(i,) for i in range(side)])
    flows = onboarding.enqueue_many([(i,) for i in range(WORKFLOWS)])
    handles += flows
    enqueue_ms = (time.perf_counter() - t0) * 1000
    ids = [h.id for h in handles]

    worker = app.worker(
        queues=["demo"], concurrency=16, lease_seconds=10, install_signal_handlers=False
    )
    thread = threading.Thread(target=worker.run, name="pgqueue-demo-worker", daemon=True)
    t0 = time.perf_counter()
    thread.start()
    done = 0
    with click.progressbar(length=len(ids), label="running", show_pos=True) as bar:
        while done < len(ids):
            with app.connection() as conn:
                row = conn.execute(_sql.query("demo_progress"), {"ids": ids}).fetchone()
            finished = int(row[0]) if row else 0
            bar.update(finished - done)
            done = finished
            time.sleep(0.1)
    elapsed = time.perf_counter() - t0
    worker.stop()
    thread.join(10)

    with app.connection() as conn:
        summary = conn.execute(_sql.query("demo_summary"), {"ids": ids}).fetchone()
    states, failed_attempts = summary if summary else ({}, 0)
    retried = (failed_attempts,)
    pickups = sorted(worker.producer.pickup_seconds) or [0.0]
    click.echo("")
    click.echo(
        f"enqueued {len(ids)} runs in {enqueue_ms:.0f} ms; "
        f"ran them in {elapsed:.2f}s ({len(ids) / elapsed:.0f} runs/s, concurrency 16)"
    )
    click.echo("states: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
    click.echo(
        f"failed attempts recorded in pgqueue.run_errors: {retried[0] if retried else 0} "
        "(flaky_api fails 1 call in 4 and is retried with backoff; rate_limited reschedules "
        "itself with RetryAfter without using an attempt)"
    )
    example = flows[0].get()
    steps = ", ".join(f"{s['name']} ({s['state']})" for s in app.run_steps(example.id))
    click.echo(f"workflow run {example.id} -> {example.result}; steps: {steps}")
    click.echo(
        f"time from enqueue to start, p50: {statistics.median(pickups) * 1000:.0f} ms "
        "(the whole batch was queued before the worker started)"
    )
    click.echo(f"\nall of it is plain SQL; try these in psql {db.redact(dsn)!r}:")
    click.echo(SQL_EXAMPLES.format(dsn=shlex.quote(db.redact(dsn))))
