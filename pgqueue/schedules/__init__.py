"""Cron schedules: the Schedule type and its ticks (schedule), and the App's schedule
actions (actions)."""

from pgqueue.schedules.schedule import (
    InvalidSchedule,
    Schedule,
    UnknownSchedule,
    due_ticks,
    next_ticks,
)

__all__ = ["InvalidSchedule", "Schedule", "UnknownSchedule", "due_ticks", "next_ticks"]
