"""Why a run is not running: the facts sql/dashboard_why.sql reads (by the rules of the
worker's claim and stager) put into words, most decisive first.

A queued run is claimed when a live worker serving its queue has a free slot, the queue
is not paused, the queue and the run's group have a permit free (limited queues,
claim_limited()) and room under their rate limits, in an ordered queue every earlier run
of its group is finished, and no run comes before it (unlimited queues take (priority, id)
order; limited ones take turns across groups). A scheduled run becomes queued at its
run_at, by the stager of a live worker serving its queue; a waiting run, when its event
arrives, its child finishes or its deadline passes, or (one enqueued with after=) when the
last of its dependencies finishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pgqueue.runs.terminal import run_ids_text, seconds_text
from pgqueue.states import RunState
from pgqueue.tasks.rates import PERIOD_WORDS, Rate

AHEAD_EXACT = 1000  # runs ahead counted exactly (dashboard_why.sql); beyond: an estimate
GROUP_AHEAD_EXACT = 100  # runs of its group ahead of a run, counted (dashboard_group_ahead)
EXPLAINED = frozenset({RunState.SCHEDULED, RunState.QUEUED, RunState.WAITING})
FAR_FUTURE_YEAR = 9999


def reasons(f: dict[str, Any]) -> list[str]:
    """The reasons for one row of dashboard_why.sql."""
    now: datetime = f["now"]
    queue = f["queue"]
    out: list[str] = []
    if f["state"] == RunState.SCHEDULED:
        if f["run_at"] > now:
            when = f"scheduled until {clock(f['run_at'], now)}"
            if f["attempt"] > 0 and f["error"]:
                when += f" (retrying after attempt {f['attempt']} failed)"
            out.append(when)
        else:
            out.append(f"due since {clock(f['run_at'], now)}: a worker's stager queues it")
    elif f["state"] == RunState.WAITING:
        deadline = f["run_at"] if f["run_at"].year < FAR_FUTURE_YEAR else None
        until = f" (deadline {clock(deadline, now)})" if deadline else " (no deadline)"
        if deadline is not None and deadline <= now:
            until = f" (deadline {clock(deadline, now)} passed: a worker's stager wakes it)"
        if f["wait_event"] is not None:
            key = f" key {f['wait_key']}" if f["wait_key"] else ""
            out.append(f"waiting for event {f['wait_event']}{key}{until}")
        elif f.get("waiting_for"):
            out.append(f"waiting for {run_ids_text(f['waiting_for'])}")
        elif f["wait_run_id"] is not None:
            child = f"waiting for child {f['wait_run_id']}"
            if f["child_state"]:
                child += f" ({f['child_task']}, {f['child_state']})"
            out.append(child + until)
        else:
            out.append("waiting" + until)
    if f["paused"]:
        out.append(f"queue {queue} is paused")
    out += backoff_reasons(f)
    if f["live_workers"] == 0:
        out.append(f"no live worker serves queue {queue}")
    if f["state"] != RunState.QUEUED:
        return out
    concurrency, group_limit = f["concurrency"], f["group_concurrency"]
    if concurrency is not None and f["permits_taken"] >= concurrency:
        out.append(
            f"queue limit {concurrency} of {concurrency} taken by "
            f"{runs_text(f['permit_holders'], f['permits_taken'])}"
        )
    if group_limit is not None and f["group_taken"] >= group_limit:
        group = f["group_key"] or "(default)"
        out.append(
            f"group {group} at its limit ({f['group_taken']} of {group_limit}: "
            f"{runs_text(f['group_holders'] or [], f['group_taken'])})"
        )
    out += flow_reasons(f)
    if f["live_workers"] and f["busy"] >= f["slots"]:
        out.append(
            f"every live worker serving queue {queue} is busy ({f['busy']} of {f['slots']} slots)"
        )
    limited = concurrency is not None or group_limit is not None or f["ordered"]
    limited = limited or f["group_rate_limit"] is not None
    if not limited and f["ahead"]:
        estimate = f.get("ahead_estimate")
        if f["ahead"] < AHEAD_EXACT:
            ahead = f"{f['ahead']:,}"
        elif estimate is not None:
            ahead = f"about {estimate:,}"
        else:
            ahead = f"{AHEAD_EXACT:,}+"
        noun = "run" if f["ahead"] == 1 else "runs"
        text = f"{ahead} {noun} ahead of it in queue {queue}"
        if estimate is not None:
            text += " (the planner's estimate)"
        if f["rate_limit"] is not None:
            text += rated_start(f)
        out.append(text)
    group_ahead = f.get("group_ahead")
    if group_ahead:
        count = f"{GROUP_AHEAD_EXACT}+" if group_ahead > GROUP_AHEAD_EXACT else f"{group_ahead:,}"
        noun = "run" if group_ahead == 1 else "runs"
        share = (
            "shares its starts between groups by weight"
            if f.get("weighted")
            else "takes its groups' runs in turns"
        )
        out.append(
            f"{count} {noun} of group {f['group_key'] or '(default)'} ahead of it "
            f"(queue {queue} {share}, each group's in order)"
        )
    if not out:
        out.append("next in line: a worker claims it at its next claim")
    return out


def backoff_reasons(f: dict[str, Any]) -> list[str]:
    """The backoffs in force on the run's queue and group (RetryAfter(scope=...))."""
    out: list[str] = []
    now: datetime = f["now"]
    for until, what, lift in (
        (f.get("backoff_until"), f"queue {f['queue']}", ""),
        (
            f.get("group_backoff_until"),
            f"group {f['group_key']} of queue {f['queue']}",
            f" --group {f['group_key']}",
        ),
    ):
        if until is None or until <= now:
            continue
        when = "until resumed" if until.year >= FAR_FUTURE_YEAR else f"until {clock(until, now)}"
        out.append(
            f"{what} backed off {when} by a RetryAfter: nothing of it starts before "
            f"(pgqueue queues resume {f['queue']}{lift} lifts it)"
        )
    return out


RESCUE_WITHIN = 5  # seconds: a worker's rescuer runs at least this often (by default)


def stale_reasons(f: dict[str, Any]) -> list[str]:
    """A running run whose lease expired (a row of dashboard_stale.sql): its worker
    stopped renewing it, and who will take it back."""
    ago = seconds_text(f["expired_seconds"])
    out = [f"lease expired {ago} ago: its worker stopped renewing it (dead or cut off)"]
    if f["rescuer"]:
        out.append(
            f"a live worker serving queue {f['queue']} rescues it within about "
            f"{RESCUE_WITHIN} s of the expiry (retried, or failed when out of attempts)"
        )
    else:
        out.append(f"no live worker serves queue {f['queue']}: nobody rescues it until one starts")
    return out


def flow_reasons(f: dict[str, Any]) -> list[str]:
    """A queued run held back by a rate limit or by its ordered group."""
    out: list[str] = []
    group = f["group_key"] or "(default)"
    if f["rate_limit"] is not None and f["rate_used"] >= f["rate_limit"]:
        rate = Rate(f["rate_limit"], int(f["rate_period"]))
        reason = (
            f"queue rate limit {rate} reached ({starts(f['rate_used'])} in the last "
            f"{PERIOD_WORDS[rate.period]})"
        )
        if f["rate_open_at"] is not None and f["rate_open_at"] > f["now"]:
            reason += f": next start at {clock(f['rate_open_at'], f['now'])}"
        out.append(reason)
    used = f["group_rate_used"] or 0
    if f["group_rate_limit"] is not None and used >= f["group_rate_limit"]:
        rate = Rate(f["group_rate_limit"], int(f["group_rate_period"]))
        out.append(
            f"group {group} at its rate limit {rate} ({starts(used)} in the last "
            f"{PERIOD_WORDS[rate.period]})"
        )
    first = f["first_in_group"]
    if first is not None and first < f["id"]:
        out.append(f"ordered group {group}: waits for run {first} to finish")
    return out


def group_limited(f: dict[str, Any]) -> bool:
    """A queue whose claims take turns across groups (claim_limited)."""
    limits = (f["concurrency"], f["group_concurrency"], f["group_rate_limit"])
    return any(x is not None for x in limits) or bool(f["ordered"])


def rated_start(f: dict[str, Any]) -> str:
    """When a queued run of a rate-limited queue (claimed in priority, then id order, as
    an unlimited one) can start at the earliest: the runs ahead of it take the rate's
    starts first, `rate_limit` a period, from when the limit next opens."""
    rate = Rate(f["rate_limit"], int(f["rate_period"]))
    now: datetime = f["now"]
    opens = f["rate_open_at"] if f["rate_open_at"] and f["rate_open_at"] > now else now
    estimated = f.get("ahead_estimate")
    periods = (estimated or f["ahead"]) // rate.limit
    start = opens + timedelta(seconds=periods * rate.period)
    bound = "not before" if f["ahead"] >= AHEAD_EXACT and estimated is None else "at"
    return f": at {rate}, its start comes {bound} about {clock(start, now)}"


def starts(n: int) -> str:
    return f"{n} start" if n == 1 else f"{n} starts"


def runs_text(ids: Sequence[int], total: int) -> str:
    listed = ", ".join(str(i) for i in ids)
    noun = "run" if total == 1 else "runs"
    more = f" and {total - len(ids)} more" if total > len(ids) else ""
    return f"{noun} {listed}{more}"


def clock(at: datetime, now: datetime) -> str:
    """14:02:05 UTC today, else 2026-12-03 14:02 UTC."""
    utc = at.astimezone(UTC)
    if utc.date() == now.astimezone(UTC).date():
        return f"{utc:%H:%M:%S} UTC"
    return f"{utc:%Y-%m-%d %H:%M} UTC"
