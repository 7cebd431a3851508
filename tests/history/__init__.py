"""A history checker for pgqueue (docs/reliability.md).

Producers, workers and the database record what happened while a scenario runs
(`tests.history.events`); `check(history)` verifies the invariants in docs/reliability.md
over the whole history and returns every violation with the events that prove it
(`tests.history.checker`). `tests.history.collect` records and reads a chaos scenario's
history; `python -m tests.history` runs one short scenario and checks it."""

from tests.history.checker import Violation, check, report
from tests.history.events import (
    Claimed,
    CronTick,
    Effect,
    Enqueued,
    Event,
    Final,
    History,
    LeaseLost,
    OutcomeRejected,
    OutcomeWritten,
    Renewed,
    RolledBack,
    Started,
    StepStored,
    Terminal,
)

__all__ = [
    "Claimed",
    "CronTick",
    "Effect",
    "Enqueued",
    "Event",
    "Final",
    "History",
    "LeaseLost",
    "OutcomeRejected",
    "OutcomeWritten",
    "Renewed",
    "RolledBack",
    "Started",
    "StepStored",
    "Terminal",
    "Violation",
    "check",
    "report",
]
