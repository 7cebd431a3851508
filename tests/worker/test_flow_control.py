"""Rate limits and ordered groups (docs/flow_control.md), proven with separate worker
processes: the limits hold across them, in SQL, at claim time."""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import sql as _sql
from tests.apps.basic import EFFECTS_DDL
from tests.apps.flow import app as flow_app
from tests.apps.flow import slow_tick, step, tick
from tests.helpers import WorkerProcess, run_workers, scalar, scalar_conn, wait_until
from tests.sql.test_explain import plan, scans
from tests.worker.parts import FROM_FRONT
from tests.worker.test_semaphores import explain_nested, seq_scans

APP = "tests.apps.flow:app"


@pytest.fixture
def flow(dsn: str, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute(EFFECTS_DDL)
    flow_app.configure(dsn=dsn)
    return flow_app


def settled(dsn: str, queue: str, n: int) -> bool:
    done = scalar(
        dsn,
        "SELECT count(*) FROM pgqueue.runs WHERE queue = %s AND state = 'succeeded'",
        (queue,),
    )
    return bool(done >= n)


def starts(dsn: str, queue: str) -> list[tuple[datetime, str, int]]:
    with psycopg.connect(dsn) as c:
        return c.execute(
            "SELECT started_at, group_key, attempt FROM pgqueue.runs WHERE queue = %s"
            " ORDER BY started_at",
            (queue,),
        ).fetchall()


def most_in_any_window(times: list[datetime], seconds: float) -> int:
    """The most starts in any half-open interval [t, t + seconds)."""
    width = timedelta(seconds=seconds)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - width:
            j += 1
        best = max(best, i - j + 1)
    return best


def test_a_window_counts_every_interval_not_fixed_buckets() -> None:
    """The checker itself: 20 starts at 0.9 s and 20 at 1.1 s are 40 in one second."""
    t0 = datetime(2026, 1, 1)
    times = [t0 + timedelta(seconds=0.9)] * 20 + [t0 + timedelta(seconds=1.1)] * 20
    assert most_in_any_window(times, 1.0) == 40
    assert most_in_any_window(times, 0.1) == 20


def test_rate_limit_holds_across_three_processes_and_reaches_the_limit(
    dsn: str, flow: pgqueue.App
) -> None:
    """20/s, 150 runs, 3 workers of 10 slots (30 could start at once): no 1 s interval
    holds more than 20 starts, and with the backlog they reach at least 95% of 20/s. The
    workers poll every 5 s: only the claim saying when the next start is allowed lets
    them keep up."""
    tick.enqueue_many([(i,) for i in range(150)])
    run_workers(dsn, APP, 3, lambda: settled(dsn, "rated", 150), "--concurrency", "10")
    rows = starts(dsn, "rated")
    times = [r[0] for r in rows]
    assert len(times) == 150
    assert most_in_any_window(times, 1.0) <= 20
    # 150 starts need 7 full periods after the first: at 95% of the limit, 133 of them
    # start in the 7 s from the first one (140 at exactly 20/s).
    first = times[0]
    in_seven = sum(1 for t in times if t < first + timedelta(seconds=7))
    assert in_seven >= 133, f"{in_seven} starts in 7 s"
    # held back, no run used an attempt: each ran once, first time
    assert {r[2] for r in rows} == {1}
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.run_errors") == 0


def test_group_rate_limits_hold_per_group_and_groups_run_side_by_side(
    dsn: str, flow: pgqueue.App
) -> None:
    """4/s per group, 5 groups of 12 runs: per group, no 1 s interval holds more than 4
    starts, at least 95% of 4/s with its backlog; the groups do not wait for each other
    (20 starts a second in all)."""
    for g in range(5):
        tick.options(queue="group_rated", group=f"g{g}").enqueue_many([(i,) for i in range(12)])
    run_workers(dsn, APP, 3, lambda: settled(dsn, "group_rated", 60), "--concurrency", "10")
    rows = starts(dsn, "group_rated")
    by_group: dict[str, list[datetime]] = defaultdict(list)
    for started_at, group, attempt in rows:
        by_group[group].append(started_at)
        assert attempt == 1
    assert sorted(by_group) == [f"g{g}" for g in range(5)]
    for group, times in by_group.items():
        assert len(times) == 12
        assert most_in_any_window(times, 1.0) <= 4, group
        # 12 starts: 2 full periods after the first; at 95%, 8 (7.6) of them in those 2 s
        assert sum(1 for t in times if t < times[0] + timedelta(seconds=2)) >= 8, group
    all_times = sorted(r[0] for r in rows)
    assert most_in_any_window(all_times, 1.0) > 4  # groups ran side by side
    assert (all_times[-1] - all_times[0]).total_seconds() < 4.5


def test_rate_limit_composes_with_concurrency(dsn: str, flow: pgqueue.App) -> None:
    """concurrency 2 and 10/s, runs of 0.3 s: at most 2 run at once (so about 6.7 starts
    a second), and the rate limit never lets more than 10 start in a second."""
    slow_tick.enqueue_many([(i,) for i in range(20)])
    run_workers(dsn, APP, 2, lambda: settled(dsn, "rated_capped", 20), "--concurrency", "5")
    with psycopg.connect(dsn) as c:
        spans = c.execute(
            "SELECT started_at, finished_at FROM pgqueue.runs WHERE queue = 'rated_capped'"
        ).fetchall()
    most = max(sum(1 for s, f in spans if s <= t < f) for t, _ in spans)
    assert most <= 2
    assert most_in_any_window(sorted(s for s, _ in spans), 1.0) <= 10


def test_a_paused_rate_limited_queue_starts_nothing(dsn: str, flow: pgqueue.App) -> None:
    flow.set_paused("rated", True)
    tick.enqueue_many([(i,) for i in range(5)])
    with WorkerProcess(dsn, APP, "--concurrency", "5", "--poll-interval", "0.1") as w:
        w.wait_ready()
        time.sleep(0.5)  # not synchronisation: a window in which nothing may start
        assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE attempt > 0") == 0
        flow.set_paused("rated", False)
        wait_until(lambda: settled(dsn, "rated", 5), message="5 runs after resume")


def test_ordered_groups_run_in_order_without_overlap_under_a_sigkill(
    dsn: str, flow: pgqueue.App
) -> None:
    """4 groups of 12 steps over 3 workers, one killed mid-way: per group, each step
    starts only after the one before it succeeded (a retry holds the group back: step 3
    of each group fails once), attempts never overlap, and the killed worker's run is
    run again before its group goes on."""
    groups = [f"acct-{g}" for g in range(4)]
    for seq in range(12):  # interleaved enqueues: ids alternate between groups
        for g in groups:
            step.options(group=g).enqueue(g, seq, 0.05, seq == 3)
    procs = [
        WorkerProcess(dsn, APP, "--concurrency", "4", "--lease-seconds", "2") for _ in range(3)
    ]
    try:
        for p in procs:
            p.wait_ready()
        wait_until(
            lambda: scalar(dsn, "SELECT count(*) FROM effects WHERE tag LIKE 'end:%%'") >= 16,
            message="a third of the steps",
        )
        victim = next(
            (
                p
                for p in procs
                if scalar(
                    dsn,
                    "SELECT count(*) FROM pgqueue.runs r JOIN pgqueue.workers w"
                    " ON w.id = r.worker_id WHERE r.state = 'running' AND w.pid = %s",
                    (p.pid,),
                )
            ),
            procs[0],
        )
        victim.kill()
        killed_at = scalar(dsn, "SELECT clock_timestamp()")
        wait_until(lambda: settled(dsn, "ordered", 48), timeout=90, message="48 steps")
    finally:
        for p in procs:
            p.stop()
    with psycopg.connect(dsn) as c:
        effects = c.execute("SELECT tag, at FROM effects ORDER BY at, id").fetchall()
    attempts: dict[str, list[tuple[int, int, datetime, datetime | None, str]]] = defaultdict(list)
    opened: dict[str, datetime] = {}
    for tag, at in effects:
        kind, rest = tag.split(":", 1)
        if kind == "start":
            opened[rest] = at
        else:
            group, seq, attempt = rest.split(":")
            attempts[group].append((int(seq), int(attempt), opened.pop(rest), at, kind))
    for rest, at in opened.items():  # started and never ended: the killed attempts
        assert at < killed_at
        group, seq, attempt = rest.split(":")
        attempts[group].append((int(seq), int(attempt), at, None, "killed"))
    assert sorted(attempts) == groups
    for group, tries in attempts.items():
        tries.sort(key=lambda a: a[2])
        # order: the successful attempts come in step order, each step once, except one
        # whose body ended on the killed worker before the kill and whose outcome went
        # with it (at least once): run again, by a later attempt, before the next step
        ends = [a for a in tries if a[4] == "end"]
        lost = [a for a, b in itertools.pairwise(ends) if a[0] == b[0]]
        assert all(a[3] < killed_at for a in lost) and len(lost) <= 1, (group, lost)
        assert all(b[1] > a[1] for a, b in itertools.pairwise(ends) if a[0] == b[0]), group
        assert [a[0] for a in ends if a not in lost] == list(range(12)), group
        # no overlap: each attempt starts after the one before it ended (or was killed)
        for before, after in itertools.pairwise(tries):
            assert after[2] >= (before[3] or killed_at), (group, before, after)
            assert after[0] >= before[0], (group, before, after)  # never a later step first
        assert any(a[4] == "fail" and a[0] == 3 for a in tries), group


def test_ordered_and_group_rate_claims_read_their_indexes(
    conn: psycopg.Connection[Any],
) -> None:
    """An ordered queue with a group rate limit, among 100,000 finished runs of it and
    2,000 groups: the claim's probes (a group's first unfinished run, its rate log) read
    runs_group_order_idx and the primary key of pgqueue.group_rates, never a scan of
    pgqueue.runs."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, group_concurrency, ordered, group_rate_limit,
                                    group_rate_period)
        VALUES ('q', 1, true, 1000, 60);
        INSERT INTO pgqueue.runs (task, queue, state, limited, group_key, finished_at)
        SELECT 't', 'q', 'succeeded', true, 'g' || (i % 2000), now()
        FROM generate_series(1, 100000) i;
        INSERT INTO pgqueue.runs (task, queue, state, limited, group_key)
        SELECT 't', 'q', 'queued', true, 'g' || (i % 2000) FROM generate_series(1, 4000) i;
        INSERT INTO pgqueue.group_rates (queue, group_key, rate_slots, rate_counts)
        SELECT 'q', 'g' || i, ARRAY[now()], ARRAY[1] FROM generate_series(1, 2000) i;
        ANALYZE pgqueue.runs; ANALYZE pgqueue.group_rates;
    """)
    params = {
        "queue": "q",
        "limit": 50,
        "worker_id": "00000000-0000-0000-0000-000000000001",
        "lease_seconds": 30,
        "finishing": [],
    }
    for _ in range(6):  # past plpgsql's fifth call: its generic plans are the ones measured
        with conn.transaction(force_rollback=True):
            got = conn.execute(_sql.query("claim_limited"), params).fetchall()
            assert len(got) == 50
    plans = explain_nested(conn, _sql.query("claim_limited"), params)
    assert not [n for n in seq_scans(plans) if n == "runs"], "the claim scanned pgqueue.runs"
    text = json.dumps(plans)
    assert "runs_group_order_idx" in text and "group_rates_pkey" in text


def test_a_queue_gaining_or_losing_the_limited_claim_refiles_its_runs(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """Runs are flagged `limited` while their queue is claimed by claim_limited(): a
    queue-level rate limit alone does not flag them (claim_rated.sql reads no flag), a
    group rate limit, a concurrency or ordered groups do. Runs already enqueued are
    re-flagged when that changes; new runs are filed by the queue's settings, from Python
    and from SQL alike."""

    @app.task(queue="later")
    def later(n: int) -> None: ...

    later.enqueue_many([(i,) for i in range(3)])

    def flags() -> list[bool]:
        rows = conn.execute("SELECT limited FROM pgqueue.runs ORDER BY id").fetchall()
        return [r[0] for r in rows]

    assert flags() == [False] * 3
    app.set_limits("later", concurrency=None, group_concurrency=None, rate_limit="5/m")
    later.enqueue(3)
    later.enqueue_many([(4,), (5,)])
    conn.execute("SELECT pgqueue.enqueue('t', queue => 'later')")
    later.options(unique_key="k").enqueue(6)  # pgqueue.enqueue_unique()
    assert flags() == [False] * 8
    app.set_limits("later", concurrency=None, group_concurrency=None, group_rate_limit="5/s")
    assert flags() == [True] * 8
    later.enqueue(7)
    conn.execute("SELECT pgqueue.enqueue('t', queue => 'later')")
    assert flags() == [True] * 10
    app.set_limits("later", concurrency=None, group_concurrency=None, group_rate_limit=None)
    assert flags() == [False] * 10
    app.set_limits("later", concurrency=2, group_concurrency=None)
    assert flags() == [True] * 10
    app.set_limits("later", concurrency=None, group_concurrency=None, rate_limit=None)
    assert flags() == [False] * 10
    app.set_limits("later", concurrency=None, group_concurrency=1, ordered=True)
    assert flags() == [True] * 10


def test_a_burst_worker_waits_for_the_rate_limit_instead_of_exiting(
    dsn: str, flow: pgqueue.App
) -> None:
    """--burst ends when nothing is due: runs held back by a rate limit are due, so a
    burst worker waits for their slots and exits once all 45 ran (20/s: 3 periods)."""
    tick.enqueue_many([(i,) for i in range(45)])
    with WorkerProcess(dsn, APP, "--concurrency", "10", "--burst") as w:
        assert w.wait(60) == 0, w.output()
    rows = starts(dsn, "rated")
    assert len(rows) == 45 and settled(dsn, "rated", 45)
    assert (rows[-1][0] - rows[0][0]).total_seconds() >= 2.0


def test_rate_only_claim_reads_the_claim_index(conn: psycopg.Connection[Any]) -> None:
    """A queue with only a rate limit is claimed by claim_rated.sql: among 100,000
    finished runs of it and 100,000 of another queue, its three scans read
    runs_claim_idx, and the update goes by the locked versions' TIDs, as claim.sql."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, rate_limit, rate_period) VALUES ('r', 100, 1);
        INSERT INTO pgqueue.runs (task, queue, state, finished_at)
        SELECT 't', 'r', 'succeeded', now() FROM generate_series(1, 100000);
        INSERT INTO pgqueue.runs (task, queue, state) SELECT 't', 'other', 'queued'
        FROM generate_series(1, 100000);
        INSERT INTO pgqueue.runs (task, queue, state) SELECT 't', 'r', 'queued'
        FROM generate_series(1, 50);
        ANALYZE pgqueue.runs;
    """)
    params = {
        "queue": "r",
        "limit": 10,
        "worker_id": "00000000-0000-0000-0000-000000000001",
        "lease_seconds": 30,
        **FROM_FRONT,
    }
    for start in (FROM_FRONT, {"after_priority": 0, "after_id": 150_000}):
        found = [s for s in scans(plan(conn, "claim_rated", params | start))
                 if s[0] != "ModifyTable"]  # fmt: skip
        assert sorted(index or kind for kind, index in found) == sorted(
            ["runs_claim_idx"] * 3 + ["Tid Scan"]
        ), found
    with conn.transaction(force_rollback=True):
        got = conn.execute(_sql.query("claim_rated"), params).fetchall()
        assert len(got) == 10


def test_rate_only_claim_takes_what_the_limit_leaves_and_says_when_to_return(
    conn: psycopg.Connection[Any],
) -> None:
    """5/s from one connection: 5 runs, then none until a second has passed, and the
    queue's rate_open_at says when (about one second after the first start); a paused
    queue or one with another limit yields nothing through this claim, and claim.sql
    nothing from a rate-limited queue."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, rate_limit, rate_period) VALUES ('r', 5, 1);
        INSERT INTO pgqueue.runs (task, queue, state) SELECT 't', 'r', 'queued'
        FROM generate_series(1, 20);
    """)
    params = {
        "queue": "r",
        "limit": 8,
        "worker_id": "00000000-0000-0000-0000-000000000001",
        "lease_seconds": 30,
        **FROM_FRONT,
    }
    # its runs are not flagged, and still the lock-free claim leaves the queue alone
    assert conn.execute(_sql.query("claim"), params).fetchall() == []
    first = conn.execute(_sql.query("claim_rated"), params).fetchall()
    assert len(first) == 5 and [r[5] for r in first] == [1] * 5  # attempt 1
    assert conn.execute(_sql.query("claim_rated"), params).fetchall() == []
    wait = scalar_conn(conn, _sql.query("rate_open_at"), {"queue": "r"})
    assert 0.5 < wait <= 1.03
    assert scalar_conn(conn, "SELECT count(*) FROM pgqueue.runs WHERE attempt > 0") == 5
    conn.execute("UPDATE pgqueue.queues SET concurrency = 3")  # claim_limited's now
    assert conn.execute(_sql.query("claim_rated"), params).fetchall() == []
    conn.execute("UPDATE pgqueue.queues SET concurrency = NULL")
    t0 = time.monotonic()
    second = wait_until(
        lambda: conn.execute(_sql.query("claim_rated"), params).fetchall(), message="a slot"
    )
    assert len(second) == 5 and time.monotonic() - t0 >= wait - 0.1


@pytest.mark.parametrize(
    ("log", "period", "limit", "asked", "claims"),
    [
        ([], 1, 3, 5, 3),  # an empty log: the first slot, and the limit filled
        ([(-5.0, 3), (-0.5, 2), (-0.1, 1)], 1, 10, 4, 4),  # an entry expired, room left
        ([(-5.0, 3), (-0.5, 2), (-0.1, 1)], 1, 7, 8, 4),  # the claim fills the limit
        ([(-0.5, 2), (0.5, 1)], 1, 10, 3, 3),  # the newest slot is ahead: added to it
        ([(-2.0, 1), (-0.5, 5)], 1, 5, 3, 0),  # no room: the log trimmed, nothing added
        ([(-100.0, 1)], 3600, 10, 2, 2),  # slots of 72 s: the second claim adds to the first's
    ],
)
def test_rate_only_claim_writes_the_log_as_rate_log_add_and_rate_opens_would(
    conn: psycopg.Connection[Any],
    log: list[tuple[float, int]],
    period: int,
    limit: int,
    asked: int,
    claims: int,
) -> None:
    """claim_rated.sql updates the queue's rate log in its own text (no function call
    per claim): after each of two claims, the log it wrote is pgqueue.rate_log_add()'s
    for its starts at its stamp, and rate_open_at is pgqueue.rate_opens()'s over that
    log. Offsets in seconds from now, slots away from the edges of the period."""
    conn.execute(
        "INSERT INTO pgqueue.queues (name, rate_limit, rate_period, rate_slots, rate_counts)"
        " SELECT 'r', %s, %s,"
        "  coalesce(array_agg(clock_timestamp() + o * interval '1 second' ORDER BY o), '{}'),"
        "  coalesce(array_agg(n ORDER BY o), '{}')"
        " FROM unnest(%s::float8[], %s::int[]) AS l(o, n)",
        (limit, period, [o for o, _ in log], [n for _, n in log]),
    )
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, state) SELECT 't', 'r', 'queued'"
        " FROM generate_series(1, 20)"
    )
    params = {
        "queue": "r",
        "limit": asked,
        "worker_id": "00000000-0000-0000-0000-000000000001",
        "lease_seconds": 30,
        **FROM_FRONT,
    }
    used = sum(n for o, n in log if o > -period)
    for _ in range(2):
        before = conn.execute("SELECT rate_slots, rate_counts FROM pgqueue.queues").fetchone()
        assert before is not None
        t0 = scalar_conn(conn, "SELECT clock_timestamp()")
        got = conn.execute(_sql.query("claim_rated"), params).fetchall()
        assert len(got) == claims
        ids = [r[0] for r in got]
        stamp = scalar_conn(
            conn, "SELECT max(started_at) FROM pgqueue.runs WHERE id = ANY(%s)", (ids,)
        )
        stamp = stamp or t0
        expected = conn.execute(
            "SELECT l.slots, l.counts, pgqueue.rate_opens(l.slots, l.counts, %s, %s, %s)"
            " FROM pgqueue.rate_log_add(%s, %s, %s, %s, %s) l",
            (limit, period, stamp, before[0], before[1], claims, stamp, period),
        ).fetchone()
        written = conn.execute(
            "SELECT rate_slots, rate_counts, rate_open_at FROM pgqueue.queues"
        ).fetchone()
        assert written == expected
        used += claims
        assert (written[2] is not None) == (used >= limit)
        claims = max(0, min(asked, limit - used))


def test_a_passed_rate_opening_does_not_wake_the_worker_again(
    conn: psycopg.Connection[Any],
) -> None:
    """rate_open_at.sql: the seconds to wait while the opening is ahead, none once it is
    more than 0.1 s behind (a paused queue's claims leave it: a worker woken for it would
    claim in a loop)."""
    conn.execute("INSERT INTO pgqueue.queues (name, rate_limit, rate_period) VALUES ('r', 5, 1)")
    conn.execute("UPDATE pgqueue.queues SET rate_open_at = clock_timestamp() + interval '2 s'")
    assert 1.5 < scalar_conn(conn, _sql.query("rate_open_at"), {"queue": "r"}) <= 2
    conn.execute("UPDATE pgqueue.queues SET rate_open_at = clock_timestamp() - interval '1 s'")
    assert conn.execute(_sql.query("rate_open_at"), {"queue": "r"}).fetchall() == []


def test_rate_limited_claims_keep_priority_order(conn: psycopg.Connection[Any]) -> None:
    """Under a rate limit the starts that are allowed go to the most urgent runs first:
    a queue-level limit (claim_rated.sql) and a group limit (claim_limited())."""
    conn.execute("""
        INSERT INTO pgqueue.queues (name, rate_limit, rate_period) VALUES ('r', 3, 60);
        INSERT INTO pgqueue.queues (name, group_rate_limit, group_rate_period)
        VALUES ('g', 2, 60);
        INSERT INTO pgqueue.runs (task, queue, state, priority)
        SELECT 'low', 'r', 'queued', 5 FROM generate_series(1, 3);
        INSERT INTO pgqueue.runs (task, queue, state, priority)
        SELECT 'high', 'r', 'queued', -5 FROM generate_series(1, 2);
        INSERT INTO pgqueue.runs (task, queue, state, limited, priority, group_key)
        SELECT 'low', 'g', 'queued', true, 5, 'a' FROM generate_series(1, 3);
        INSERT INTO pgqueue.runs (task, queue, state, limited, priority, group_key)
        SELECT 'high', 'g', 'queued', true, -5, 'a' FROM generate_series(1, 1);
    """)
    worker = "00000000-0000-0000-0000-000000000001"
    rated = {"queue": "r", "limit": 10, "worker_id": worker, "lease_seconds": 30}
    got = conn.execute(_sql.query("claim_rated"), rated | FROM_FRONT).fetchall()
    assert sorted(r[1] for r in got) == ["high", "high", "low"]
    grouped = rated | {"queue": "g", "finishing": []}
    got = conn.execute(_sql.query("claim_limited"), grouped).fetchall()
    assert sorted(r[1] for r in got) == ["high", "low"]
