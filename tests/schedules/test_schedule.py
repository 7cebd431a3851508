"""Cron schedules: definitions, ticks (DST on a fixed clock), sync from code, one run per
tick across worker processes, downtime with and without catch-up (the CLI:
tests/cli/test_schedules_cli.py)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import pgqueue
from pgqueue.schedules import schedule as schedules
from pgqueue.schedules.schedule import due_ticks, next_ticks
from pgqueue.worker.maintenance.scheduler import Scheduler
from tests.helpers import InProcessWorker, WorkerProcess, scalar, wait_until

OPS_APP = "tests.apps.ops:app"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def as_utc(ticks: list[datetime]) -> list[str]:
    return [t.astimezone(UTC).strftime("%m-%d %H:%M") for t in ticks]


# -- ticks: pure functions on a fixed clock -------------------------------------------


def test_five_fields_and_a_leading_seconds_field() -> None:
    after = utc(2024, 1, 1, 0, 0, 0)
    assert next_ticks("*/5 * * * *", "UTC", after, 2) == [
        utc(2024, 1, 1, 0, 5),
        utc(2024, 1, 1, 0, 10),
    ]
    # Six fields: seconds first.
    assert next_ticks("30 * * * * *", "UTC", after, 2) == [
        utc(2024, 1, 1, 0, 0, 30),
        utc(2024, 1, 1, 0, 1, 30),
    ]
    assert next_ticks("@hourly", "UTC", after) == [utc(2024, 1, 1, 1)]
    # Strictly after: a tick exactly at `after` is not repeated.
    assert next_ticks("0 * * * *", "UTC", utc(2024, 1, 1, 1)) == [utc(2024, 1, 1, 2)]


def test_dst_europe_berlin() -> None:
    berlin = "Europe/Berlin"
    # Spring forward, 2024-03-31: 02:00 local does not exist. Hourly ticks stay one real
    # hour apart and skip the missing hour; a daily job at 02:30 runs at 03:00 instead.
    hourly = next_ticks("0 * * * *", berlin, utc(2024, 3, 30, 23, 30), 3)
    assert [t.isoformat() for t in hourly] == [
        "2024-03-31T01:00:00+01:00",
        "2024-03-31T03:00:00+02:00",
        "2024-03-31T04:00:00+02:00",
    ]
    assert as_utc(hourly) == ["03-31 00:00", "03-31 01:00", "03-31 02:00"]
    daily = next_ticks("30 2 * * *", berlin, utc(2024, 3, 30, 12), 3)
    assert [t.isoformat() for t in daily] == [
        "2024-03-31T03:00:00+02:00",
        "2024-04-01T02:30:00+02:00",
        "2024-04-02T02:30:00+02:00",
    ]
    # Fall back, 2024-10-27: 02:00-03:00 local happens twice. Hourly ticks still come one
    # real hour apart (02:00 twice, with each offset); 02:30 fires in both.
    hourly = next_ticks("0 * * * *", berlin, utc(2024, 10, 26, 22, 30), 4)
    assert [t.isoformat() for t in hourly] == [
        "2024-10-27T01:00:00+02:00",
        "2024-10-27T02:00:00+02:00",
        "2024-10-27T02:00:00+01:00",
        "2024-10-27T03:00:00+01:00",
    ]
    assert as_utc(hourly) == ["10-26 23:00", "10-27 00:00", "10-27 01:00", "10-27 02:00"]
    daily = next_ticks("30 2 * * *", berlin, utc(2024, 10, 26, 12), 3)
    assert as_utc(daily) == ["10-27 00:30", "10-27 01:30", "10-28 01:30"]


def test_dst_america_new_york() -> None:
    ny = "America/New_York"
    # 2024-03-10 spring forward at 02:00 EST; 2024-11-03 fall back at 02:00 EDT.
    daily_9am = next_ticks("0 9 * * *", ny, utc(2024, 3, 9, 0), 2)
    assert as_utc(daily_9am) == ["03-09 14:00", "03-10 13:00"]  # 9:00 local both days
    assert all(t.hour == 9 for t in daily_9am)
    daily_9am = next_ticks("0 9 * * *", ny, utc(2024, 11, 2, 0), 2)
    assert as_utc(daily_9am) == ["11-02 13:00", "11-03 14:00"]
    every_30 = next_ticks("*/30 * * * *", ny, utc(2024, 11, 3, 5, 15), 4)
    assert as_utc(every_30) == ["11-03 05:30", "11-03 06:00", "11-03 06:30", "11-03 07:00"]
    assert [t.utcoffset() for t in every_30] == [
        timedelta(hours=-4),
        timedelta(hours=-5),
        timedelta(hours=-5),
        timedelta(hours=-5),
    ]


def test_due_ticks_latest_only_or_all_with_catch_up() -> None:
    start = utc(2024, 1, 1, 0, 0)
    now = start + timedelta(minutes=5, seconds=30)
    fire, following = due_ticks("* * * * *", "UTC", start, now, catch_up=False)
    assert fire == [utc(2024, 1, 1, 0, 5)] and following == utc(2024, 1, 1, 0, 6)
    fire, following = due_ticks("* * * * *", "UTC", start, now, catch_up=True)
    assert fire == [start + timedelta(minutes=m) for m in range(6)]
    assert following == utc(2024, 1, 1, 0, 6)
    # Nothing due yet.
    assert due_ticks("* * * * *", "UTC", start, start - timedelta(seconds=1), catch_up=True) == (
        [],
        start,
    )
    # A long outage of a per-second schedule: bounded work, the latest ticks only.
    now = start + timedelta(hours=2, microseconds=500)
    fire, following = due_ticks("* * * * * *", "UTC", start, now, catch_up=False)
    assert fire == [utc(2024, 1, 1, 2, 0, 0)] and following == utc(2024, 1, 1, 2, 0, 1)
    fire, _ = due_ticks("* * * * * *", "UTC", start, now, catch_up=True)
    assert len(fire) == schedules.MAX_CATCH_UP
    assert fire[-1] == utc(2024, 1, 1, 2, 0, 0) and fire == sorted(fire)
    # DST: catching up over the Berlin fall-back night fires each real hour once.
    fire, _ = due_ticks(
        "0 * * * *",
        "Europe/Berlin",
        utc(2024, 10, 26, 23),
        utc(2024, 10, 27, 2, 10),
        catch_up=True,
    )
    assert as_utc(fire) == ["10-26 23:00", "10-27 00:00", "10-27 01:00", "10-27 02:00"]


# -- definitions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
        ({"cron": "* * *"}, "expected 5 fields"),
        ({"cron": "0 0 * * * * 2030"}, "expected 5 fields"),
        ({"cron": "every day"}, "expected 5 fields"),
        ({"cron": "0 0 30 2 *"}, "invalid cron expression"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus_Mons"}, "unknown time zone 'Mars/Olympus_Mons'"),
    ],
)
def test_bad_definitions_fail_at_definition_time(options: dict[str, Any], fragment: str) -> None:
    app = pgqueue.App("postgresql://localhost/unused")
    with pytest.raises(pgqueue.InvalidSchedule) as info:

        @app.periodic(**options)
        def job() -> None: ...

    message = str(info.value)
    assert fragment in message and "\n" not in message
    assert isinstance(info.value, pgqueue.UserError)
    assert not app.tasks and not app.schedules


def test_periodic_and_schedule_api() -> None:
    app = pgqueue.App("postgresql://localhost/unused")

    @app.periodic(cron="*/5 * * * *", kwargs={"to": "ops"})
    @app.task(name="report", queue="reports", priority=-1, max_attempts=5)
    def report(to: str) -> None: ...

    @app.periodic(cron="0 3 * * *", tz="Europe/Berlin")
    def cleanup() -> None: ...

    assert isinstance(report, pgqueue.Task) and isinstance(cleanup, pgqueue.Task)
    s = app.schedules["report"]
    assert (s.task, s.queue, s.priority, s.max_attempts, json.loads(s.kwargs)) == (
        "report",
        "reports",
        -1,
        5,
        {"to": "ops"},
    )
    assert app.schedules[cleanup.name].tz == "Europe/Berlin"
    # A second schedule of the same task needs a name of its own.
    with pytest.raises(pgqueue.InvalidSchedule, match="give one of them name="):
        app.schedule("report", "0 * * * *", report, kwargs={"to": "x"})
    app.schedule("report-hourly", "0 * * * *", report, kwargs={"to": "x"}, queue="urgent")
    assert app.schedules["report-hourly"].queue == "urgent"
    # Arguments are checked against the task, and must be JSON.
    with pytest.raises(pgqueue.InvalidArguments):
        app.schedule("bad", "0 * * * *", report, args=[1, 2])
    with pytest.raises(TypeError):
        app.schedule("bad", "0 * * * *", report, kwargs={"to": object()})
    # By name, for a task this process does not import.
    by_name = app.schedule("remote", "0 * * * *", "other.service.task", args=[1])
    assert (by_name.task, by_name.queue) == ("other.service.task", "default")


# -- sync from code ----------------------------------------------------------------------


def test_sync_keeps_progress_disables_removed_and_respects_pause(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    @app.periodic(cron="0 * * * *", name="hourly")
    @app.periodic(cron="0 0 * * *", name="daily")
    @app.task(name="job")
    def job() -> None: ...

    written, disabled = schedules.sync(conn, app, ["default"])
    assert sorted(written) == ["daily", "hourly"] and disabled == []
    rows = {r["name"]: r for r in app.list_schedules()}
    now = scalar(app.dsn, "SELECT now()")
    assert now < rows["hourly"]["next_fire_at"] <= now + timedelta(hours=1)
    assert rows["hourly"]["enabled"] and not rows["hourly"]["paused"]

    # A worker that was down: next_fire_at in the past survives a sync of the same code.
    conn.execute(
        "UPDATE pgqueue.schedules SET next_fire_at = now() - interval '3 hours', paused = true"
        " WHERE name = 'hourly'"
    )
    past = scalar(app.dsn, "SELECT next_fire_at FROM pgqueue.schedules WHERE name = 'hourly'")
    assert schedules.sync(conn, app, ["default"]) == ([], [])
    row = conn.execute(
        "SELECT next_fire_at, paused FROM pgqueue.schedules WHERE name = 'hourly'"
    ).fetchone()
    assert row == (past, True)  # operators' pause is not undone by a worker start

    # Changed cron: starts afresh. Removed from code: disabled, not deleted.
    del app.schedules["daily"], app.schedules["hourly"]
    app.schedule("hourly", "30 * * * *", job)
    written, disabled = schedules.sync(conn, app, ["default"])
    assert written == ["hourly"] and disabled == ["daily"]
    rows = {r["name"]: r for r in app.list_schedules()}
    assert rows["hourly"]["next_fire_at"] > now and rows["hourly"]["next_fire_at"].minute == 30
    assert rows["daily"]["enabled"] is False

    # Another app's schedule (a task and a queue it does not know) is left alone.
    other = pgqueue.App(app.dsn)
    schedules.sync(conn, other, ["elsewhere"])
    assert scalar(app.dsn, "SELECT count(*) FROM pgqueue.schedules WHERE enabled") == 1


# -- firing -------------------------------------------------------------------------------


def fire_round(dsn: str) -> int:
    """One scheduler round, as a worker's Scheduler service runs it."""

    async def main() -> int:
        async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, min_size=1) as pool:
            return await Scheduler(pool).fire_due()

    return asyncio.run(main())


def schedule_runs(dsn: str, name: str) -> list[tuple[datetime, str]]:
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT run_at, state FROM pgqueue.runs WHERE idempotency_key LIKE %s ORDER BY run_at",
            (f"pgqueue.schedule:{name}@%",),
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


@pytest.mark.parametrize("catch_up", [False, True])
def test_downtime_fires_the_latest_missed_tick_or_all_with_catch_up(
    app: pgqueue.App, conn: psycopg.Connection[Any], catch_up: bool
) -> None:
    @app.periodic(cron="0 * * * *", name="hourly", catch_up=catch_up)
    @app.task(name="job")
    def job() -> None: ...

    schedules.sync(conn, app, ["default"])
    # The workers were down for five hours and a bit: 6 hourly ticks passed.
    conn.execute(
        "UPDATE pgqueue.schedules SET next_fire_at = date_trunc('hour', now()) - interval '5 hours'"
    )
    before = scalar(app.dsn, "SELECT date_trunc('hour', now())")
    assert fire_round(app.dsn) == 1
    assert fire_round(app.dsn) == 0  # nothing more is due: a second round fires nothing
    runs = [at for at, _ in schedule_runs(app.dsn, "hourly")]
    row = conn.execute(
        "SELECT last_fire_at, last_run_id, next_fire_at FROM pgqueue.schedules"
    ).fetchone()
    assert row is not None
    last, last_run, following = row
    assert last in (before, before + timedelta(hours=1))  # the hour may turn meanwhile
    assert following == last + timedelta(hours=1)
    if catch_up:
        first = before - timedelta(hours=5)
        assert runs == [first + timedelta(hours=h) for h in range(len(runs))] and runs[-1] == last
    else:
        assert runs == [last]
    assert app.get_run(last_run).run_at == last


def test_many_rounds_at_once_enqueue_each_tick_once(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    @app.periodic(cron="0 * * * *", name="hourly", catch_up=True)
    @app.task(name="job")
    def job() -> None: ...

    schedules.sync(conn, app, ["default"])
    conn.execute(
        "UPDATE pgqueue.schedules SET next_fire_at = date_trunc('hour', now()) - interval '9 hours'"
    )

    async def race() -> list[int]:
        async with AsyncConnectionPool(
            app.dsn, kwargs={"autocommit": True}, min_size=4, max_size=4
        ) as pool:
            scheduler = Scheduler(pool)
            return list(await asyncio.gather(*(scheduler.fire_due() for _ in range(4))))

    assert sum(asyncio.run(race())) == 1
    runs = schedule_runs(app.dsn, "hourly")
    assert len(runs) == len({at for at, _ in runs}) >= 10


def test_three_worker_processes_one_run_per_tick(dsn: str, conn: psycopg.Connection[Any]) -> None:
    procs = [WorkerProcess(dsn, OPS_APP, "--log-level", "WARNING") for _ in range(3)]
    try:
        for p in procs:
            p.wait_ready()
        start = scalar(dsn, "SELECT date_trunc('second', now()) + interval '1 second'")
        wait_until(
            lambda: (
                scalar(
                    dsn,
                    "SELECT count(*) FROM pgqueue.runs WHERE task = 'ops.tick' AND run_at >= %s",
                    (start,),
                )
                >= 10
            ),
            timeout=30,
            message="ten ticks with three workers up",
        )
        end = scalar(dsn, "SELECT date_trunc('second', now()) - interval '1 second'")
        assert all(p.proc.poll() is None for p in procs), "a worker died"
    finally:
        for p in procs:
            p.stop()
    ticks = [at for at, _ in schedule_runs(dsn, "every-second") if start <= at <= end]
    expected = [start + timedelta(seconds=s) for s in range(int((end - start).total_seconds()) + 1)]
    assert len(expected) >= 8
    assert ticks == expected  # every second once: none missed, none twice
    # Each tick was enqueued promptly, and ran exactly once (a run records one attempt).
    late = scalar(
        dsn,
        "SELECT max(created_at - run_at) FROM pgqueue.runs"
        " WHERE task = 'ops.tick' AND run_at BETWEEN %s AND %s",
        (start, end),
    )
    assert late < timedelta(seconds=3), late
    rows = conn.execute(
        "SELECT state, attempt FROM pgqueue.runs"
        " WHERE task = 'ops.tick' AND run_at BETWEEN %s AND %s",
        (start, end),
    ).fetchall()
    assert rows and all(r == ("succeeded", 1) for r in rows), rows


def test_a_worker_fires_missed_ticks_when_it_comes_back(
    app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    calls: list[str] = []

    @app.periodic(cron="0 * * * *", name="hourly")
    @app.periodic(cron="0 * * * *", name="hourly-all", catch_up=True, kwargs={"tag": "all"})
    @app.task(name="job")
    def job(tag: str = "latest") -> None:
        calls.append(tag)

    schedules.sync(conn, app, ["default"])
    conn.execute(
        "UPDATE pgqueue.schedules SET next_fire_at = date_trunc('hour', now()) - interval '4 hours'"
    )
    with InProcessWorker(app, concurrency=4):
        wait_until(lambda: len(calls) >= 6, message="the missed ticks to run")
        wait_until(
            lambda: (
                scalar(app.dsn, "SELECT count(*) FROM pgqueue.runs WHERE state = 'succeeded'")
                == len(calls)
            )
        )
    assert calls.count("latest") == 1
    assert calls.count("all") in (5, 6)  # 5, or 6 if the hour turned meanwhile


# -- CLI --------------------------------------------------------------------------------


def test_zone_names_are_checked_like_croniter_sees_them() -> None:
    assert schedules.zone("Europe/Berlin") == ZoneInfo("Europe/Berlin")
    with pytest.raises(pgqueue.InvalidSchedule):
        schedules.zone("")
