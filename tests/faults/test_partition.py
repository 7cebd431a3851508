"""A network partition (issue 47, point 4): a `pgqueue worker` in a network namespace of
its own (tests/faults/netns.py) reaches a private server through a veth pair, and only
it. It claims five runs whose bodies take 6 s (tests/faults/partition_app.py: they end
without the database); the link is cut while they run. Their
leases (3 s) expire, a second worker on the host rescues them and runs them to the end.
The link comes back: the cut-off worker's bodies have finished, its outcomes are fenced
out (rejected: the runs are finished) or its lease keeper finds the leases lost first,
and it logs that it lost them, and it serves again
without a restart: with the second worker stopped, it finishes a new run. The history
checker (tests/history) finds no violation over the whole history, and counts five
re-executions, one per run the partition took from the first worker.

The same scenario with the cut-off worker running the broken variant of complete.sql
without its fence (tests/history/variants.py, no-fence) must make the checker report a
violation: its late outcomes overwrite the rescuer's.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import time
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgqueue
from tests.chaos import app as chaos
from tests.faults import partition_app
from tests.faults.netns import partitioned
from tests.helpers import WorkerProcess, run_states, scalar, wait_until
from tests.history import Started, check, collect, report, variants
from tests.private import private_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

APP = "tests.faults.partition_app:app"
RUNS = 5
BODY_SECONDS = 6.0
OPTIONS = ("--queues", "chaos", "--concurrency", str(RUNS), "--lease-seconds", "3")


def held_by(dsn: str, pid: int) -> int:
    return int(
        scalar(
            dsn,
            "SELECT count(*) FROM pgqueue.runs r JOIN pgqueue.workers w ON w.id = r.worker_id"
            " WHERE r.state = 'running' AND w.pid = %s",
            (pid,),
        )
    )


def executions(dsn: str, pid: int) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM chaos_exec WHERE pid = %s", (pid,)))


def ended(path: Path, pid: int, dsn: str) -> int:
    """Executions of worker `pid` whose body ended (partition_app records it locally)."""
    ids = [json.loads(line)["exec_id"] for line in path.read_text().splitlines() if line]
    query = "SELECT count(*) FROM chaos_exec WHERE pid = %s AND exec_id = ANY(%s::uuid[])"
    return int(scalar(dsn, query, (pid, ids)))


@pytest.mark.parametrize("variant", [None, "no-fence"])
def test_a_partitioned_worker_is_fenced_out_and_serves_again(
    variant: str | None, tmp_path: Path
) -> None:
    ends = tmp_path / "ends.jsonl"
    ends.touch()
    ends.chmod(0o666)
    env = {partition_app.ENDS: str(ends)}
    with (
        partitioned() as link,
        private_server(listen=link.host_address, trust=link.network) as server,
        contextlib.ExitStack() as stack,
    ):
        inside = server.database("partition")  # through the veth: the namespace's DSN
        dsn = make_conninfo(inside, host="127.0.0.1")  # the host's
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(chaos.DDL)
            collect.install(c)
        producer = pgqueue.App(dsn)
        stack.callback(producer.close)
        acknowledged: list[tuple[float, int]] = []

        def enqueue(tag: str, seconds: float) -> int:
            run_id = producer.enqueue_by_name("chaos.work", (tag, seconds), queue="chaos").id
            acknowledged.append((time.time(), run_id))
            return run_id

        cut_off = stack.enter_context(
            WorkerProcess(
                inside,
                APP,
                *OPTIONS,
                "--log-level",
                "INFO",
                prefix=link.exec_prefix(),
                env=env | ({variants.ENV: variant} if variant else {}),
            )
        ).wait_ready()
        ids = [enqueue(f"p{i}", BODY_SECONDS) for i in range(RUNS)]
        wait_until(
            lambda: held_by(dsn, cut_off.pid) == RUNS and executions(dsn, cut_off.pid) == RUNS,
            20,
            message="the worker in the namespace to run every run",
        )

        link.cut()
        cut_at = time.monotonic()
        rescuer = stack.enter_context(WorkerProcess(dsn, APP, *OPTIONS, env=env)).wait_ready()
        wait_until(
            lambda: run_states(dsn, ids) == ["succeeded"] * RUNS,
            60,
            0.1,
            message="the host's worker to rescue and finish the runs",
        )
        # the cut-off worker's bodies ended too (at 6 s), their outcomes held by its completer
        wait_until(lambda: ended(ends, cut_off.pid, dsn) == RUNS, 20, message="its bodies")
        partition = time.monotonic() - cut_at
        assert ended(ends, rescuer.pid, dsn) == RUNS

        link.restore()
        rescuer.signal(signal.SIGTERM)
        assert rescuer.wait(30) == 0
        after = enqueue("after", 0.2)
        wait_until(
            lambda: run_states(dsn, [after]) == ["succeeded"],
            60,
            0.1,
            message="the cut-off worker to serve a new run, without a restart",
        )
        assert executions(dsn, cut_off.pid) == RUNS + 1
        cut_off.signal(signal.SIGTERM)
        assert cut_off.wait(30) == 0
        log = cut_off.output()
        partition_app.copy_ends(dsn, str(ends))

        history = collect.read(dsn, {"chaos": (None, None)}, acknowledged)
        violations = check(history)
        started: dict[int | None, int] = {}
        for e in history.of(Started):
            started[e.run] = started.get(e.run, 0) + 1
        reexecuted = sum(n - 1 for n in started.values())
        print(f"partition: {partition:.1f}s")
        print(report(violations, history))
        print(f"re-executions: {reexecuted}")
        lines = [line for line in log.splitlines() if re.search(r"run \d+ ", line)]
        print("the cut-off worker's log:", *lines, sep="\n  ")
        if variant is not None:
            assert "violation" in report(violations, history)
            assert {v.invariant for v in violations} & {"fence", "terminal"}, violations
            return
        assert not violations, report(violations, history)
        assert reexecuted == RUNS
        for run_id in ids:
            # its outcome fenced out ("rejected"), or its lease found lost first by the
            # lease keeper ("stopping, its lease was lost"): either says it lost the run
            lost = [
                ln
                for ln in lines
                if f"run {run_id} " in ln and ("rejected" in ln or "lease was lost" in ln)
            ]
            assert lost, f"the cut-off worker did not log that it lost run {run_id}"
