"""The checker on histories written by hand: a clean one passes, and each invariant,
broken once, is reported with the events that prove it."""

from __future__ import annotations

import pytest

from tests.history import (
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
    check,
    report,
)

T1, T2 = "token-1", "token-2"


def clean() -> History:
    """Run 1 is claimed, lost (its worker died), rescued, claimed again and succeeds;
    run 2 is a workflow whose step ran once; run 3 comes from a cron tick."""
    h = History(limits={"lim": (1, 1)})
    h.add(
        Enqueued(0.0, 1),
        Claimed(1.0, 1, attempt=1, token=T1),
        Effect(1.1, 1, attempt=1, token=T1, queue="lim", group="g", end=None),
        Renewed(2.0, 1, token=T1),
        LeaseLost(5.0, 1, token=T1),
        Claimed(5.5, 1, attempt=2, token=T2),
        Effect(5.6, 1, attempt=2, token=T2, queue="lim", group="g", end=5.9),
        OutcomeWritten(6.0, 1, state="succeeded", writer=T2, holder=T2),
        Terminal(6.0, 1, old_state="running", new_state="succeeded"),
        Final(9.0, 1, state="succeeded"),
        Enqueued(0.0, 2),
        Claimed(1.0, 2, attempt=1, token="t3"),
        Effect(1.2, 2, attempt=1, token="t3", step="s0", end=1.3),
        StepStored(1.35, 2, step="s0", attempt=1),
        OutcomeWritten(1.5, 2, state="succeeded", writer="t3", holder="t3"),
        Terminal(1.5, 2, old_state="running", new_state="succeeded"),
        Final(9.0, 2, state="succeeded"),
        CronTick(3.0, 3, schedule="tick", tick="2026-01-01T00:00:03"),
        Terminal(3.5, 3, old_state="running", new_state="succeeded"),
        Final(9.0, 3, state="succeeded"),
        RolledBack(0.5, 4),
    )
    return h


def test_a_clean_history_has_no_violation() -> None:
    h = clean()
    assert check(h) == []
    assert report([], h).startswith("history check: no violation")


def test_a_body_started_after_its_lease_was_lost_holds_no_permit() -> None:
    # run 9's lease is cut (lost at 4.0) before its body starts (4.2): the body holds no
    # permit, so run 1's second attempt (5.6) is alone under the limit of 1; before, the
    # span closed before it opened and stayed open to the end of the history
    h = clean()
    h.add(
        Claimed(3.9, 9, attempt=1, token="t9"),
        LeaseLost(4.0, 9, token="t9"),
        Effect(4.2, 9, attempt=1, token="t9", queue="lim", group="h", end=4.3),
    )
    assert check(h) == []


BROKEN: dict[str, tuple[str, list[Event]]] = {
    "lost": ("terminal", [Enqueued(0.0, 9)]),
    "unfinished": ("terminal", [Enqueued(0.0, 9), Final(9.0, 9, state="queued")]),
    "terminal twice": (
        "terminal",
        [Terminal(7.0, 1, old_state="succeeded", new_state="succeeded")],
    ),
    "two valid leases": (
        "lease",
        [Claimed(5.7, 1, attempt=3, token="t9", while_held=T2)],
    ),
    "outcome of a lost attempt": (
        "fence",
        [OutcomeWritten(6.5, 1, state="succeeded", writer=T1, holder=None)],
    ),
    "outcome after expiry": (
        "fence",
        [OutcomeWritten(6.5, 1, state="succeeded", writer=T2, holder=T2, lease_valid=False)],
    ),
    "heartbeat after expiry": ("fence", [Renewed(6.5, 1, token=T1, lease_valid=False)]),
    "step without a lease": (
        "fence",
        [StepStored(1.4, 2, step="s1", attempt=1, lease_valid=False)],
    ),
    "stored step again": ("step", [Effect(1.4, 2, attempt=1, token="t3", step="s0", end=1.45)]),
    "queue limit": (
        "limit",
        [Effect(5.7, 9, attempt=1, token="t9", queue="lim", group="h", end=5.8)],
    ),
    "lost body counted until its lease went": (
        "limit",
        [Effect(4.0, 9, attempt=1, token="t9", queue="lim", group="h", end=4.5)],
    ),
    "cron twice": (
        "cron",
        [
            CronTick(3.1, 8, schedule="tick", tick="2026-01-01T00:00:03"),
            Terminal(3.6, 8, old_state="running", new_state="succeeded"),
            Final(9.0, 8, state="succeeded"),
        ],
    ),
    "rolled back but visible": ("rollback", [Final(9.0, 4, state="queued")]),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_violation_is_reported_with_its_events(case: str) -> None:
    invariant, extra = BROKEN[case]
    h = clean()
    h.add(*extra)
    found = check(h)
    assert [v.invariant for v in found] == [invariant], "\n".join(map(str, found))
    text = report(found, h)
    assert "violation" in text
    # the offending event (the first one added) is among those shown
    assert extra[0].describe() in text, text
