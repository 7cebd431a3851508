"""Group weights (docs/flow_control.md, Group weights): a weighted queue's starts follow
its groups' weights while they have runs waiting, and a group with nothing waiting gives
its share to the others. The claim's rules in SQL, then worker processes."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.db import sql as _sql
from tests.apps.basic import EFFECTS_DDL
from tests.apps.weights import app as weights_app
from tests.apps.weights import span, tick
from tests.helpers import WorkerProcess, run_workers, scalar, scalar_conn
from tests.worker.test_semaphores import WORKER, explain_nested, max_overlap, seq_scans

APP = "tests.apps.weights:app"


def weighted_queue(conn: psycopg.Connection[Any], weights: dict[str, int], **limits: Any) -> None:
    """Queue q with `weights` and `limits` (concurrency 100 unless given)."""
    limits = {"concurrency": 100} | limits
    conn.execute(
        "INSERT INTO pgqueue.queues (name, concurrency, group_concurrency, group_weights,"
        " default_group_weight) VALUES ('q', %s, %s, %s, %s)",
        (
            limits["concurrency"],
            limits.get("group_concurrency"),
            json.dumps(weights),
            limits.get("default", 1),
        ),
    )


def enqueue(conn: psycopg.Connection[Any], group: str, n: int, priority: int = 0) -> None:
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, group_key, state, priority, limited)"
        " SELECT 't', 'q', %s, 'queued', %s, true FROM generate_series(1, %s)",
        (group, priority, n),
    )


def claim(conn: psycopg.Connection[Any], limit: int, finish: bool = True) -> list[str]:
    """The groups of the runs one limited claim of q takes, sorted; with `finish`, those
    runs succeed at once (their permits return)."""
    params = {
        "queue": "q",
        "limit": limit,
        "worker_id": WORKER,
        "lease_seconds": 30,
        "finishing": [],
    }
    rows = conn.execute(_sql.query("claim_limited"), params).fetchall()
    if finish:
        conn.execute(
            "UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now(),"
            " lease_token = NULL, lease_expires_at = NULL WHERE id = ANY (%s)",
            ([r[0] for r in rows],),
        )
    return sorted(r[10] for r in rows)


def shares(conn: psycopg.Connection[Any], claims: int, limit: int) -> Counter[str]:
    got: Counter[str] = Counter()
    for _ in range(claims):
        got.update(claim(conn, limit))
    return got


def test_starts_follow_the_weights(conn: psycopg.Connection[Any]) -> None:
    weighted_queue(conn, {"gold": 3, "silver": 2})
    for g in ("gold", "silver", "bronze"):
        enqueue(conn, g, 200)
    # 3 + 2 + 1 = 6: every 6 starts, whatever the claims' sizes, hold 3, 2 and 1
    assert shares(conn, 12, 5) == {"gold": 30, "silver": 20, "bronze": 10}
    assert shares(conn, 6, 1) == {"gold": 3, "silver": 2, "bronze": 1}
    assert shares(conn, 2, 30) == {"gold": 30, "silver": 20, "bronze": 10}


def test_a_group_with_nothing_waiting_gives_its_share(conn: psycopg.Connection[Any]) -> None:
    weighted_queue(conn, {"gold": 3, "silver": 2})
    enqueue(conn, "gold", 100)
    enqueue(conn, "bronze", 100)
    # no silver runs: the claim still takes all 8 it may, gold and bronze 3:1
    assert claim(conn, 8) == ["bronze"] * 2 + ["gold"] * 6
    # 100 permits: 3:1 again, all taken
    assert Counter(claim(conn, 100)) == {"gold": 75, "bronze": 25}
    # gold has 19 runs left: bronze takes the rest
    assert Counter(claim(conn, 100)) == {"gold": 19, "bronze": 73}


def test_a_group_back_from_idle_has_no_credit_saved(conn: psycopg.Connection[Any]) -> None:
    """bronze idles while gold and silver take 500 starts; when it has runs again it gets
    its 1 in 6, not a burst to catch up."""
    weighted_queue(conn, {"gold": 3, "silver": 2})
    enqueue(conn, "gold", 1000)
    enqueue(conn, "silver", 1000)
    assert shares(conn, 50, 10) == {"gold": 300, "silver": 200}
    # the queue keeps the passes of the groups ahead of its virtual time only
    vtime, passes = conn.execute("SELECT group_vtime, group_passes FROM pgqueue.queues").fetchone()
    assert vtime > 99 and set(passes) <= {"gold", "silver"}
    assert all(p > vtime for p in passes.values())
    enqueue(conn, "bronze", 100)
    got = shares(conn, 3, 12)
    assert 6 <= got["bronze"] <= 7 and got["silver"] == 12, got  # a burst would be 36


def test_weights_within_priorities_and_group_limits(conn: psycopg.Connection[Any]) -> None:
    weighted_queue(conn, {"gold": 3}, group_concurrency=2, default=2)
    enqueue(conn, "gold", 10)
    enqueue(conn, "silver", 10)
    enqueue(conn, "bronze", 1, priority=-1)
    # priority first; then each group up to its 2 permits, though gold weighs more
    assert claim(conn, 10, finish=False) == ["bronze", "gold", "gold", "silver", "silver"]
    assert claim(conn, 10, finish=False) == []
    conn.execute(
        "UPDATE pgqueue.runs SET state = 'succeeded', finished_at = now(), lease_token = NULL,"
        " lease_expires_at = NULL WHERE state = 'running'"
    )
    # default weight 2 for silver: gold 3 : silver 2 over the next 10
    assert shares(conn, 5, 2) == {"gold": 6, "silver": 4}


def test_weights_with_group_rate_limits_and_ordered_groups(
    conn: psycopg.Connection[Any],
) -> None:
    weighted_queue(conn, {"gold": 3, "silver": 2}, group_concurrency=1)
    conn.execute(
        "UPDATE pgqueue.queues SET group_rate_limit = 3, group_rate_period = 60 WHERE name = 'q'"
    )
    for g in ("gold", "silver", "bronze"):
        enqueue(conn, g, 10)
    # each group 3 starts a minute, 1 at a time: gold's weight cannot take more than that,
    # and the others take what is left
    assert shares(conn, 5, 9) == {"gold": 3, "silver": 3, "bronze": 3}
    assert claim(conn, 9) == []
    assert scalar_conn(conn, "SELECT rate_open_at > now() FROM pgqueue.queues") is True
    # ordered: a group whose earliest unfinished run is delayed waits; the others go on
    conn.execute(
        "UPDATE pgqueue.queues SET group_rate_limit = NULL, group_rate_period = NULL,"
        " ordered = true WHERE name = 'q';"
        " UPDATE pgqueue.runs SET state = 'scheduled', run_at = now() + interval '1 hour'"
        " WHERE id = (SELECT min(id) FROM pgqueue.runs WHERE group_key = 'gold'"
        " AND state = 'queued')"
    )
    assert claim(conn, 9) == ["bronze", "silver"]


def test_a_queue_without_weights_takes_turns_as_before(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO pgqueue.queues (name, concurrency) VALUES ('q', 100)")
    for g in ("gold", "silver", "bronze"):
        enqueue(conn, g, 20)
    assert shares(conn, 5, 6) == {"gold": 10, "silver": 10, "bronze": 10}
    assert scalar_conn(conn, "SELECT group_passes FROM pgqueue.queues") == {}


def runs_indexes(plan: Any) -> set[str]:
    """The indexes of pgqueue.runs an EXPLAIN (FORMAT JSON) plan reads."""
    found: set[str] = set()
    if isinstance(plan, dict):
        if plan.get("Relation Name") == "runs" and "Index Name" in plan:
            found.add(plan["Index Name"])
        for value in plan.values():
            found |= runs_indexes(value)
    elif isinstance(plan, list):
        for value in plan:
            found |= runs_indexes(value)
    return found


def test_weighted_claim_reads_the_claim_index(conn: psycopg.Connection[Any]) -> None:
    """A weighted claim finds each group's runs through the index of queued limited runs
    by group (runs_group_claim_idx): no scan of pgqueue.runs, and a backlog of 100,000
    runs (and 20,000 delayed ones) is not read."""
    weighted_queue(conn, {"gold": 3, "silver": 2})
    enqueue(conn, "gold", 100_000)
    enqueue(conn, "silver", 50)
    enqueue(conn, "bronze", 50)
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, group_key, state, limited, run_at)"
        " SELECT 't', 'q', 'gold', 'scheduled', true, now() + interval '1 hour'"
        " FROM generate_series(1, 20000);"
        " ANALYZE pgqueue.runs"
    )
    assert claim(conn, 10) == ["bronze"] * 2 + ["gold"] * 5 + ["silver"] * 3  # passes now
    params = {"queue": "q", "limit": 12, "worker_id": WORKER, "lease_seconds": 30}
    plans = explain_nested(conn, _sql.query("claim_limited"), params | {"finishing": []})
    text = json.dumps(plans)
    assert not [n for n in seq_scans(plans) if n == "runs"], text
    weighted = [p for p in plans if "wpass" in p["Query Text"]]
    assert len(weighted) == 2  # the pick and the write of the passes
    probes = [p for p in plans if p["Query Text"].lstrip().startswith("SELECT r.group_key")]
    assert len(probes) == 4  # the first group, then after each of the 3
    for p in [*probes, weighted[0]]:
        assert runs_indexes(p["Plan"]) == {"runs_group_claim_idx"}, p
    outer = plans[-1]["Plan"]
    touched = outer.get("Shared Hit Blocks", 0) + outer.get("Shared Read Blocks", 0)
    assert touched < 500, f"claim touched {touched} blocks: it read the backlog"


def test_weighted_claim_costs_about_what_the_turns_cost(conn: psycopg.Connection[Any]) -> None:
    """After 15,000 runs of 3 groups claimed since the last VACUUM (their dead entries at
    the front of each group in runs_group_claim_idx), the next claim of 50 reads at most
    1.5x the blocks with weights as without (measured: about 1.2x)."""
    conn.execute("ALTER TABLE pgqueue.runs SET (autovacuum_enabled = false)")
    params = {"queue": "q", "limit": 50, "worker_id": WORKER, "lease_seconds": 30}
    touched = []
    for weights in (None, {"gold": 3, "silver": 2}):
        conn.execute("DELETE FROM pgqueue.runs; DELETE FROM pgqueue.queues")
        if weights is None:
            conn.execute("INSERT INTO pgqueue.queues (name, concurrency) VALUES ('q', 1000)")
        else:
            weighted_queue(conn, weights, concurrency=1000)
        for g in ("gold", "silver", "bronze"):
            enqueue(conn, g, 10_000)
        conn.execute("VACUUM ANALYZE pgqueue.runs")
        for _ in range(300):
            claim(conn, 50)
        plans = explain_nested(conn, _sql.query("claim_limited"), params | {"finishing": []})
        outer = plans[-1]["Plan"]
        touched.append(outer.get("Shared Hit Blocks", 0) + outer.get("Shared Read Blocks", 0))
    plain, weighted = touched
    assert weighted <= 1.5 * plain, touched


# -- worker processes ---------------------------------------------------------------------


@pytest.fixture
def weights(dsn: str, conn: psycopg.Connection[Any]) -> pgqueue.App:
    conn.execute(EFFECTS_DDL)
    weights_app.configure(dsn=dsn)
    return weights_app


def start_order(dsn: str, queue: str) -> list[str]:
    """The groups of the queue's started runs in the order their claims took them (a
    claim's runs share started_at; claims of a queue take turns)."""
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT group_key FROM pgqueue.runs WHERE queue = %s AND started_at IS NOT NULL"
            " ORDER BY started_at, id",
            (queue,),
        ).fetchall()
    return [r[0] for r in rows]


def off_windows(order: list[str], weights: dict[str, int], window: int) -> list[str]:
    """Each window of `window` consecutive starts in which a group's count is more than
    10% off its weighted share."""
    total = sum(weights.values())
    bad = []
    counts = Counter(order[:window])
    for i in range(len(order) - window + 1):
        if i:
            counts[order[i - 1]] -= 1
            counts[order[i + window - 1]] += 1
        for g, w in weights.items():
            want = window * w / total
            if abs(counts[g] - want) > 0.1 * want:
                bad.append(f"starts {i}..{i + window}: {g} {counts[g]}, want {want:.1f}")
    return bad


def test_the_checker_finds_a_window_off_its_weights() -> None:
    fair = ["gold", "gold", "gold", "silver", "silver", "bronze"] * 100
    weights = {"gold": 3, "silver": 2, "bronze": 1}
    assert off_windows(fair, weights, 200) == []
    skewed = fair[:300] + ["gold"] * 30 + fair[300:]
    assert off_windows(skewed, weights, 200)


def test_three_workers_start_groups_by_their_weights(dsn: str, weights: pgqueue.App) -> None:
    """3,000 starts by 3 worker processes: in every window of 200 while all three groups
    have runs waiting, each group's starts are within 10% of its 3:2:1 share."""
    n = {"gold": 1800, "silver": 1200, "bronze": 600}  # each outlasts 3,000 starts
    for group, count in n.items():
        tick.options(group=group).enqueue_many([(i,) for i in range(count)])
    run_workers(
        dsn,
        APP,
        3,
        lambda: (
            scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE started_at IS NOT NULL") >= 3000
        ),
        "--concurrency",
        "2",
        timeout=120,
    )
    order = start_order(dsn, "weighted")[:3000]
    assert len(order) == 3000
    got = Counter(order)
    assert all(got[g] < count for g, count in n.items()), got  # all were still waiting
    assert off_windows(order, {"gold": 3, "silver": 2, "bronze": 1}, 200) == []


def test_workers_give_an_idle_groups_share_to_the_others(dsn: str, weights: pgqueue.App) -> None:
    """No bronze runs: gold and silver share the queue's 4 permits 3:2, and the permits
    are all in use while runs wait (the claim is work-conserving)."""
    for group, count in (("gold", 60), ("silver", 40)):
        span.options(group=group).enqueue_many([(f"{group}-{i}", 0.1) for i in range(count)])
    run_workers(
        dsn,
        APP,
        2,
        lambda: scalar(dsn, "SELECT count(*) FROM effects WHERE tag LIKE 'end:%%'") >= 100,
        "--concurrency",
        "4",
        timeout=120,
    )
    order = start_order(dsn, "weighted_slow")
    assert off_windows(order[:80], {"gold": 3, "silver": 2}, 50) == []
    assert max_overlap(dsn) == 4


def test_weights_of_a_queue_not_stored_are_refused(app: pgqueue.App) -> None:
    with pytest.raises(pgqueue.UserError, match="queue 'nowhere' has no limits stored"):
        app.set_group_weights("nowhere", {"gold": 3})


def test_declared_weights_are_stored_by_a_worker_and_set_at_run_time(
    dsn: str, weights: pgqueue.App
) -> None:
    WorkerProcess(dsn, APP, "--concurrency", "1").wait_ready().stop()
    assert weights.group_weights("weighted") == {
        "concurrency": 6,
        "group_concurrency": None,
        "group_weights": {"gold": 3, "silver": 2},
        "default_group_weight": 1,
    }
    weights.set_group_weights("weighted", {"bronze": 4}, default_group_weight=2)
    stored = weights.group_weights("weighted")
    assert stored and (stored["group_weights"], stored["default_group_weight"]) == (
        {"bronze": 4},
        2,
    )
    weights.set_group_weights("weighted", None)
    stored = weights.group_weights("weighted")
    assert stored and (stored["group_weights"], stored["default_group_weight"]) == ({}, 2)


@pytest.mark.parametrize("weights", ['{"gold": 2.5}', '{"gold": 0}', '{"gold": "3"}', "[3]"])
def test_the_schema_refuses_weights_the_claim_cannot_use(
    conn: psycopg.Connection[Any], weights: str
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation, match="queues_group_weights_check"):
        conn.execute(
            "INSERT INTO pgqueue.queues (name, concurrency, group_weights) VALUES ('q', 1, %s)",
            (weights,),
        )
