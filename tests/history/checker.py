"""The invariants in docs/reliability.md, checked over a whole history.

`check(history)` returns every violation found, each with the events that prove it; an
empty list means the history is consistent with every guarantee below, by name:

- terminal: every acknowledged run (and every cron run) exists at the end, in a
  terminal state, which it entered exactly once and never left.
- lease: a claim never takes a run whose lease is still valid (at most one valid lease
  per run).
- fence: no outcome, heartbeat or step is accepted from an attempt whose lease was lost
  or expired, or that no longer held the run.
- step: a step whose success was stored never runs again (later, or in a later attempt).
- limit: task bodies executing at any instant never exceed a queue's concurrency, nor
  its group_concurrency in one group. A body holds its permit from its start to its end,
  or until its lease was lost if that came first (its run was rescued: the permit went
  with the lease). A body that starts after its lease was already lost (cut between the
  claim and the start) holds no permit.
- cron: a schedule's tick enqueues at most one run.
- rollback: no run enqueued in a rolled-back transaction exists.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from tests.history.events import (
    Claimed,
    CronTick,
    Effect,
    Enqueued,
    Event,
    Final,
    History,
    LeaseLost,
    OutcomeWritten,
    Renewed,
    RolledBack,
    StepStored,
    Terminal,
)

T = TypeVar("T", bound=Event)
TERMINAL = ("succeeded", "failed", "canceled")
# Most events shown per violation (the rest are counted).
SHOWN = 12


@dataclass
class Violation:
    invariant: str
    message: str
    events: list[Event] = field(default_factory=list)

    def __str__(self) -> str:
        shown = sorted(self.events, key=lambda e: e.at)
        lines = [f"violation of {self.invariant}: {self.message}"]
        lines += [f"    {e.describe()}" for e in shown[:SHOWN]]
        if len(shown) > SHOWN:
            lines.append(f"    ... and {len(shown) - SHOWN} more events")
        return "\n".join(lines)


def check(history: History) -> list[Violation]:
    """Every violation of the invariants in `history` (module docstring)."""
    return [
        *_terminal(history),
        *_leases(history),
        *_fence(history),
        *_steps(history),
        *_limits(history),
        *_cron(history),
        *_rollback(history),
    ]


def report(violations: Sequence[Violation], history: History) -> str:
    """What `check` found, for a log: the verdict, then each violation and its events."""
    counts = ", ".join(f"{n} {kind}" for kind, n in history.counts().items())
    if not violations:
        return f"history check: no violation ({counts})"
    head = f"history check: {len(violations)} violation(s) ({counts})"
    return "\n".join([head, *(str(v) for v in violations)])


def _by_run(events: Iterable[T]) -> dict[int, list[T]]:
    out: dict[int, list[T]] = defaultdict(list)
    for e in events:
        if e.run is not None:
            out[e.run].append(e)
    return out


def _terminal(h: History) -> list[Violation]:
    final = {e.run: e for e in h.of(Final)}
    moves = _by_run(h.of(Terminal))
    expected = _by_run([*h.of(Enqueued), *h.of(CronTick)])
    out = []
    for run, why in sorted(expected.items()):
        end = final.get(run)
        if end is None:
            out.append(Violation("terminal", f"run {run} was acknowledged but does not exist", why))
            continue
        if end.state not in TERMINAL:
            out.append(
                Violation("terminal", f"run {run} ended {end.state}, not terminal", [*why, end])
            )
            continue
        entered = [m for m in moves.get(run, []) if m.new_state in TERMINAL]
        left = [m for m in moves.get(run, []) if m.old_state in TERMINAL]
        if len(entered) != 1 or left:
            out.append(
                Violation(
                    "terminal",
                    f"run {run} entered a terminal state {len(entered)} times and left one "
                    f"{len(left)} times",
                    [*why, *moves.get(run, []), end],
                )
            )
    return out


def _leases(h: History) -> list[Violation]:
    return [
        Violation(
            "lease",
            f"run {c.run} was claimed by attempt {c.attempt} while another attempt's "
            f"lease ({c.while_held}) was still valid",
            [c, *[e for e in _of_token(h, c.run, c.while_held)]],
        )
        for c in h.of(Claimed)
        if c.while_held is not None
    ]


def _of_token(h: History, run: int | None, token: str | None) -> list[Event]:
    return [e for e in h.events if e.run == run and getattr(e, "token", None) == token]


def _fence(h: History) -> list[Violation]:
    lost: dict[tuple[int | None, str | None], LeaseLost] = {
        (e.run, e.token): e for e in h.of(LeaseLost)
    }
    out = []
    for o in h.of(OutcomeWritten):
        writer = o.writer if o.writer is not None else o.holder
        stale = not o.lease_valid or writer != o.holder or writer is None
        if stale:
            why = (
                "its lease had expired"
                if not o.lease_valid
                else f"the run was held by {o.holder}"
                if writer != o.holder
                else "no attempt held the run"
            )
            proof: list[Event] = [o, *_of_token(h, o.run, writer)]
            if (o.run, writer) in lost:
                proof.append(lost[(o.run, writer)])
            out.append(
                Violation(
                    "fence",
                    f"run {o.run}: an outcome ({o.state}) of attempt {writer} was accepted, "
                    f"but {why}",
                    proof,
                )
            )
    for r in h.of(Renewed):
        if not r.lease_valid:
            out.append(
                Violation(
                    "fence",
                    f"run {r.run}: a heartbeat of {r.token} was accepted after its lease expired",
                    [r, *_of_token(h, r.run, r.token)],
                )
            )
    for s in h.of(StepStored):
        if not s.lease_valid:
            out.append(
                Violation(
                    "fence",
                    f"run {s.run}: step {s.step} of attempt {s.attempt} was stored without a "
                    "valid lease",
                    [s],
                )
            )
    return out


def _steps(h: History) -> list[Violation]:
    stored = {(s.run, s.step): s for s in h.of(StepStored)}
    out = []
    for e in h.of(Effect):
        if e.step is None:
            continue
        s = stored.get((e.run, e.step))
        if s is None:
            continue
        if e.at > s.at or (e.attempt is not None and e.attempt > s.attempt):
            out.append(
                Violation(
                    "step",
                    f"run {e.run}: step {e.step} ran again (attempt {e.attempt}) after "
                    f"attempt {s.attempt} stored its success",
                    [s, e],
                )
            )
    return out


def _limits(h: History) -> list[Violation]:
    lost: dict[tuple[int | None, str | None], float] = {
        (e.run, e.token): e.at for e in h.of(LeaseLost)
    }
    out = []
    for queue, (limit, group_limit) in sorted(h.limits.items()):
        bodies = [e for e in h.of(Effect) if e.queue == queue and e.step is None]
        # a body whose lease was lost before it started holds no permit: its span would
        # close before it opens (and, swept in time order, never close)
        spans = [(e, end) for e in bodies if (end := _permit_end(e, lost)) > e.at]
        if limit is not None:
            out += _overlaps(spans, limit, f"queue {queue}")
        if group_limit is not None:
            for group in sorted({e.group for e in bodies if e.group is not None}):
                mine = [(e, end) for e, end in spans if e.group == group]
                out += _overlaps(mine, group_limit, f"group {group} of queue {queue}")
    return out


def _permit_end(e: Effect, lost: dict[tuple[int | None, str | None], float]) -> float:
    end = e.end if e.end is not None else math.inf
    return min(end, lost.get((e.run, e.token), math.inf))


def _overlaps(spans: list[tuple[Effect, float]], limit: int, where: str) -> list[Violation]:
    """One violation per stretch of time in which more than `limit` spans were open
    (an end frees its permit before a start at the same instant takes it)."""
    points = sorted(
        [(e.at, 1, i) for i, (e, _) in enumerate(spans)]
        + [(end, -1, i) for i, (_, end) in enumerate(spans)]
    )
    open_: set[int] = set()
    out: list[Violation] = []
    peak: set[int] = set()
    for _, delta, i in points:
        if delta > 0:
            open_.add(i)
            if len(open_) > limit and len(open_) > len(peak):
                peak = set(open_)
        else:
            open_.discard(i)
            if not open_ and peak:
                out.append(_over(spans, peak, limit, where))
                peak = set()
    if peak:
        out.append(_over(spans, peak, limit, where))
    return out


def _over(spans: list[tuple[Effect, float]], peak: set[int], limit: int, where: str) -> Violation:
    return Violation(
        "limit",
        f"{len(peak)} bodies executing at once in {where} (limit {limit})",
        [spans[i][0] for i in sorted(peak)],
    )


def _cron(h: History) -> list[Violation]:
    ticks: dict[tuple[str, str], list[CronTick]] = defaultdict(list)
    for t in h.of(CronTick):
        ticks[(t.schedule, t.tick)].append(t)
    return [
        Violation("cron", f"schedule {s} tick {tick} enqueued {len(runs)} runs", list(runs))
        for (s, tick), runs in sorted(ticks.items())
        if len({r.run for r in runs}) > 1
    ]


def _rollback(h: History) -> list[Violation]:
    final = {e.run: e for e in h.of(Final)}
    return [
        Violation(
            "rollback",
            f"run {r.run} exists, but its enqueue was rolled back",
            [r, final[r.run]],
        )
        for r in h.of(RolledBack)
        if r.run in final
    ]
