"""Schedules: cron expressions that enqueue a task at each tick.

Ticks are computed by croniter in the schedule's time zone. An expression has the five
classic fields (minute hour day-of-month month day-of-week), or six with a leading
seconds field (`*/10 * * * * *`: every ten seconds, as in Quartz or Spring), or one of
croniter's aliases (`@hourly`, `@daily`, ...).

The rows live in pgqueue.schedules: every worker writes the schedules of its code there
when it starts (`sync`), and its scheduler service fires due ticks (see
pgqueue/worker/maintenance/scheduler.py). Each tick is enqueued with an idempotency key
made of the schedule's name and the tick's instant, so a tick yields one run however many
workers fire it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import psycopg
from croniter import CroniterError, croniter

from pgqueue.db import payload as _json
from pgqueue.db import sql as _sql
from pgqueue.enqueue.checks import check_name
from pgqueue.errors import UserError

if TYPE_CHECKING:
    from pgqueue.db.database import Database
    from pgqueue.tasks.task import Task

# After downtime, a schedule with catch_up=True enqueues at most this many missed ticks
# (the most recent ones); without catch_up only the latest missed tick fires.
MAX_CATCH_UP = 100
# How many ticks `due_ticks` walks forward before it jumps back from `now` instead.
_WALK_LIMIT = 1000


class InvalidSchedule(UserError, ValueError):
    """A cron expression, time zone or schedule definition that cannot work."""


class UnknownSchedule(UserError, LookupError):
    """No schedule of that name in pgqueue.schedules."""


@dataclass(frozen=True)
class Schedule:
    """A schedule as defined in code; the options of its runs come from its task."""

    name: str
    cron: str
    tz: str
    task: str
    args: str  # JSON text of a list
    kwargs: str  # JSON text of an object
    queue: str
    priority: int
    max_attempts: int
    timeout_seconds: float | None
    group_key: str | None
    catch_up: bool


# -- cron: pure functions of (expression, zone, instant) -------------------------------


def zone(tz: str) -> ZoneInfo:
    """The IANA time zone `tz`, or InvalidSchedule."""
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidSchedule(
            f"unknown time zone {tz!r}: use an IANA name such as 'UTC', 'Europe/Berlin' "
            "or 'America/New_York'"
        ) from None


def _iterator(cron: str, tz: str, start: datetime) -> croniter:
    if start.tzinfo is None:
        raise ValueError("cron times must be timezone-aware (e.g. datetime.now(UTC))")
    return croniter(cron, start.astimezone(zone(tz)), second_at_beginning=True)


def check_cron(cron: str, tz: str = "UTC") -> None:
    """Raise InvalidSchedule unless `cron` is a valid expression that fires at all."""
    fields = cron.split() if isinstance(cron, str) else []
    if not fields or (len(fields) not in (5, 6) and not cron.strip().startswith("@")):
        raise InvalidSchedule(
            f"invalid cron expression {cron!r}: expected 5 fields (minute hour day month "
            "weekday) or 6 with seconds first, e.g. '*/5 * * * *' or '*/10 * * * * *'"
        )
    zone(tz)
    try:
        _iterator(cron, tz, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except (CroniterError, ValueError, KeyError) as exc:
        raise InvalidSchedule(f"invalid cron expression {cron!r}: {exc}") from None


def next_ticks(cron: str, tz: str, after: datetime, count: int = 1) -> list[datetime]:
    """The next `count` ticks strictly after `after`, as aware datetimes in zone `tz`.

    Daylight saving time follows croniter: in a skipped hour (spring forward) a daily
    job set inside the gap runs at the first instant after it and an hourly tick in it
    does not happen; in a repeated hour (fall back) a time inside it fires twice, once
    for each offset."""
    it = _iterator(cron, tz, after)
    return [it.get_next(datetime) for _ in range(count)]


def due_ticks(
    cron: str, tz: str, next_fire_at: datetime, now: datetime, *, catch_up: bool
) -> tuple[list[datetime], datetime]:
    """The ticks to enqueue at `now` for a schedule whose next unfired tick is
    `next_fire_at`, and the schedule's next tick after them.

    Every tick in [next_fire_at, now] is due. Without catch_up only the latest of them
    fires; with it, all of them up to the latest MAX_CATCH_UP."""
    if next_fire_at > now:
        return [], next_fire_at
    kept: deque[datetime] = deque(maxlen=MAX_CATCH_UP if catch_up else 1)
    tick = next_fire_at
    it = _iterator(cron, tz, next_fire_at)
    for _ in range(_WALK_LIMIT):
        if tick > now:
            return list(kept), tick
        kept.append(tick)
        tick = it.get_next(datetime)
    # A long outage of a frequent schedule: walk back from now instead of forward.
    back = _iterator(cron, tz, now + timedelta(microseconds=1))
    latest: list[datetime] = []
    while len(latest) < (kept.maxlen or 1):
        t = back.get_prev(datetime)
        if t < next_fire_at:
            break
        latest.append(t)
    return latest[::-1], next_ticks(cron, tz, now)[0]


def tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of one tick of one schedule."""
    return f"pgqueue.schedule:{name}@{tick.astimezone(UTC).isoformat()}"


# -- definitions in code ---------------------------------------------------------------


class Registered(Protocol):
    """The tasks and schedules of an App: its Registry (or the App itself)."""

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]: ...

    @property
    def schedules(self) -> Mapping[str, Schedule]: ...

    @property
    def default_queue(self) -> str: ...

    @property
    def database(self) -> Database: ...


def define(
    registry: Registered,
    name: str,
    cron: str,
    task: Task[Any, Any] | str,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    tz: str = "UTC",
    queue: str | None = None,
    catch_up: bool = False,
) -> Schedule:
    """Build a Schedule, checking everything that can be checked now."""
    check_name("schedule", name)
    check_cron(cron, tz)
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise InvalidSchedule(f"schedule {name!r}: args must be a list or tuple")
    kwargs = dict(kwargs or {})
    what = f"arguments of schedule {name!r}"
    limit, depth = registry.database.max_payload_bytes, registry.database.max_json_depth
    if isinstance(task, str):
        found = registry.tasks.get(task)
        if found is None:
            # A task this process does not import: the worker checks its arguments.
            return Schedule(
                name=name,
                cron=cron,
                tz=tz,
                task=check_name("task", task),
                args=_json.dumps(list(args), what=what, limit=limit, max_depth=depth),
                kwargs=_json.dumps(kwargs, what=what, limit=limit, max_depth=depth),
                queue=check_name("queue", queue or registry.default_queue),
                priority=0,
                max_attempts=3,
                timeout_seconds=None,
                group_key=None,
                catch_up=catch_up,
            )
        task = found
    task.validate(args, kwargs)
    return Schedule(
        name=name,
        cron=cron,
        tz=tz,
        task=task.name,
        args=_json.dumps(list(args), what=what, limit=limit, max_depth=depth),
        kwargs=_json.dumps(kwargs, what=what, limit=limit, max_depth=depth),
        queue=check_name("queue", queue or task.queue),
        priority=task.priority,
        max_attempts=task.max_attempts,
        timeout_seconds=task.timeout,
        group_key=task.group_for(args, kwargs),
        catch_up=catch_up,
    )


def sync(
    conn: psycopg.Connection[Any], registry: Registered, queues: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Write the registry's schedules to pgqueue.schedules (a worker does this at start).

    A new schedule, or one whose cron or zone changed or that comes back after being
    disabled, starts at its next tick after now. Schedules missing from the code are
    disabled if they belong to this registry: their task is one of its tasks or their queue
    one this worker serves. Returns (names written, names disabled)."""
    with conn.transaction():
        row = conn.execute("SELECT now()").fetchone()
        assert row is not None
        now: datetime = row[0]
        defined = list(registry.schedules.values())
        params: dict[str, Any] = {
            "name": [s.name for s in defined],
            "cron": [s.cron for s in defined],
            "tz": [s.tz for s in defined],
            "task": [s.task for s in defined],
            "args": [s.args for s in defined],
            "kwargs": [s.kwargs for s in defined],
            "queue": [s.queue for s in defined],
            "priority": [s.priority for s in defined],
            "max_attempts": [s.max_attempts for s in defined],
            "timeout_seconds": [s.timeout_seconds for s in defined],
            "group_key": [s.group_key for s in defined],
            "catch_up": [s.catch_up for s in defined],
            "next_fire_at": [next_ticks(s.cron, s.tz, now)[0] for s in defined],
        }
        written = [r[0] for r in conn.execute(_sql.query("sync_schedules"), params)]
        disabled = [
            r[0]
            for r in conn.execute(
                _sql.query("disable_schedules"),
                {
                    "names": [s.name for s in defined],
                    "tasks": sorted(registry.tasks),
                    "queues": list(queues),
                },
            )
        ]
    return written, disabled


# -- operations (the CLI and App methods) ---------------------------------------------


def list_all(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    from psycopg.rows import dict_row

    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_sql.query("list_schedules")).fetchall()


def set_paused(conn: psycopg.Connection[Any], name: str, paused: bool) -> None:
    """Pause a schedule, or resume it from its next tick after now: the ticks that
    passed while it was paused are not fired."""
    with conn.transaction():
        row = conn.execute(_sql.query("lock_schedule"), {"name": name}).fetchone()
        if row is None:
            raise _unknown(name)
        cron, tz, now = row
        next_fire_at = None if paused else next_ticks(cron, tz, now)[0]
        conn.execute(
            _sql.query("set_schedule_paused"),
            {"name": name, "paused": paused, "next_fire_at": next_fire_at},
        )


def trigger(conn: psycopg.Connection[Any], name: str) -> int:
    """Enqueue one run of a schedule now, outside its cron; returns the run id."""
    row = conn.execute(_sql.query("trigger_schedule"), {"name": name}).fetchone()
    if row is None:
        raise _unknown(name)
    return int(row[0])


def _unknown(name: str) -> UnknownSchedule:
    return UnknownSchedule(
        f"no schedule named {name!r}; `pgqueue schedules` lists them (a worker writes a "
        "schedule there when it starts)"
    )
